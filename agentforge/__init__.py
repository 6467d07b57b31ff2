"""agentforge: faster GPU kernels from LLM agents, checked by an evaluator you can trust.

Importing the package has no side effects and pulls in nothing heavy: the sandbox child imports
`agentforge.evaluator` on bare GPU images that have only torch and numpy.
"""

__version__ = "0.1.0"
