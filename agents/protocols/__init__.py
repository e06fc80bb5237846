from agents.protocols import aetheria  # noqa: F401
