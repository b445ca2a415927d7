"""auditor: the side path and every stage's heartbeats in, classification of missing indices and
the conservation verdict out.
"""
