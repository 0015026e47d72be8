"""`python -m dataplane_agent`: run the data-plane agent."""

from dataplane_agent.main import main

main()
