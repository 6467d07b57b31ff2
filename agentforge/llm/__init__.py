"""LLM providers behind one small protocol (see `base.Provider`)."""
