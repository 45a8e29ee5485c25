"""Agent teams: specs, budgets, the shared workspace, agents, the supervisor and the run loop."""
