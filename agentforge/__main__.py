from agentforge.cli import main

main()
