"""Commands built on the services: the emitter and relay, the recorder, the pipeline launcher (up,
demo, status), inspect. Nothing imports a tool except another tool or a bench.
"""
