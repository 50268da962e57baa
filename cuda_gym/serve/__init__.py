"""The judge as an HTTP service (`cuda-gym serve`; extra `serve`): trainers on other machines submit
candidates and collect verdicts (client: `cuda_gym.eval.remote.RemoteEvaluator`). docs/serving.md."""
