"""Use cases behind every tool, reached through the JobService facade (facade.py).

Importing this package imports nothing else: the server declares its tools with the result models in
results/ at start, and builds the facade, with all it plans with, on first use.
"""
