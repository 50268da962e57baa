"""Policies that play the cuda_gym environments.

- `cuda_gym.trajectory` (in cuda_gym, which the leaderboard reads too): the episode records
  (`Turn`, `Trajectory`) and their JSONL file;
- `cuda_gym_agents.llm`: chat backends (OpenAI-compatible server, local transformers checkpoint, scripted);
- `cuda_gym_agents.react`: the ReAct policy that plays one episode with a chat backend;
- `cuda_gym_agents.rollout`: many episodes at once, `trajectories.jsonl` and `summary.json`;
- `cuda_gym_agents.cli`: the `cuda-gym agent` command.

The folder agents/ installs as the package `cuda_gym_agents`, so it never collides with another
package named `agents` (openai-agents). Importing it imports nothing heavy; import the submodule you need.
"""
