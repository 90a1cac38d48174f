"""The loop: the agent and hook protocols, spaces, budget, seeding, episode accounting, the one loop, evaluation episodes."""
