"""Policies that play the cuda_gym environments.

- `agents.trajectory`: the episode records (`Turn`, `Trajectory`) and their JSONL file;
- `agents.llm`: chat backends (OpenAI-compatible server, local transformers checkpoint, scripted);
- `agents.react`: the ReAct policy that plays one episode with a chat backend;
- `agents.rollout`: many episodes at once, `trajectories.jsonl` and `summary.json`;
- `agents.cli`: the `cuda-gym agent` command.

Importing `agents` imports nothing heavy; import the submodule you need.
"""
