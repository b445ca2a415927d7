"""Byte formats read or written by the pipeline: Axis Studio binary BVH, Xsens MXTP02, the Axis
skeletons, recordings (.mlrec, .mlmf) and pcap captures.
"""
