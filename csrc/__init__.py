"""cuda_gym's native sources (installed as the package data `cuda_gym.csrc`): `templates/` holds the
parameterised kernel templates that agents/template_agent.py renders into candidates. No Python here."""
