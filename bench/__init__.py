"""dormant's benchmarks. ``python -m bench all`` measures dormant side by side with its peers
(Strands Agents, LangGraph, OpenAI Agents SDK, Pydantic AI, Google ADK) and a hand-rolled
floor, in one run; ``python -m bench --help`` lists the scenarios. The single-purpose scripts
(``overhead.py``, ``coldstart.py``, ``dynamodb_cost.py``) still run on their own."""
