"""Planted candidate: does not parse."""

def run(:
    pass
