"""Technique notes for the coder, one Markdown file per operation class and backend (read by
`agentforge.agent.knowledge`); a package so that installs carry them."""
