"""The CUDA Agent workspace (cuda_gym/envs/workspace_env.py), its multi-file candidates
(cuda_gym/extension.py, candidate.pack_workdir) and the tool-calling ReAct agent, on the CPU."""
from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import cuda_gym  # noqa: F401 - registers the IDs
from cuda_gym.envs.workspace_env import TOOL_SCHEMAS, WorkspaceEnv
from cuda_gym.eval.candidate import InvalidCandidate, pack_workdir, unpack_files
from cuda_gym.extension import BINDING_REGISTRY_H, ExtensionError, load_extension
from cuda_gym.native import KernelSignatureError
from cuda_gym.tasks import get_task, solution_path

from .helpers import GELU_TASK

SOFTMAX_TASK = "builtin/L1/softmax"
SOFTMAX_WORKDIR = Path(__file__).resolve().parent.parent / "benchmarks" / "candidates" / "workspace_softmax"


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def softmax_files() -> dict[str, str]:
    return {p.relative_to(SOFTMAX_WORKDIR).as_posix(): p.read_text() for p in sorted(SOFTMAX_WORKDIR.rglob("*"))
            if p.is_file()}


def test_registered_ids_and_tool_schemas():
    for suffix in ("Builtin", "L1", "L2", "L3", "Ops6K", "Synth"):
        spec = gym.spec(f"CudaKernelWorkspace-{suffix}-v0")
        assert spec.entry_point == "cuda_gym.envs.workspace_env:WorkspaceEnv"
        assert spec.kwargs["reward_mode"] == "final" and spec.kwargs["max_turns"] == 40
    names = [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert names == ["list_files", "read_file", "write_file", "edit_file", "compile", "verify", "profile", "submit"]
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function" and schema["function"]["description"]
        parameters = schema["function"]["parameters"]
        assert parameters["type"] == "object" and parameters["additionalProperties"] is False
        assert parameters["required"] == list(parameters["properties"])
        assert all(p["type"] == "string" and p["description"] for p in parameters["properties"].values())
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}
    assert by_name["edit_file"]["required"] == ["path", "old", "new"] and by_name["submit"]["properties"] == {}


def test_scripted_episode_writes_a_shipped_solution_verifies_and_submits(cpu_evaluator):
    env = gym.make("CudaKernelWorkspace-Builtin-v0", backend="cpu", evaluator=cpu_evaluator)
    observation, info = env.reset(options={"task_id": GELU_TASK})
    workdir = Path(info["workdir"])
    assert "GUIDE.md" in observation and "class Model" in observation and info["max_turns"] == 40
    assert sorted(p.relative_to(workdir).as_posix() for p in workdir.rglob("*") if p.is_file()) == [
        "GUIDE.md", "kernels/binding_registry.h", "model.py"]
    assert (workdir / "model.py").read_text().startswith(get_task(GELU_TASK).source.rstrip())
    assert env.unwrapped.tool_schemas == TOOL_SCHEMAS

    solution = solution_path(get_task(GELU_TASK), "cpu").read_text()
    observation, reward, terminated, truncated, info = env.step(call("write_file", path="model_new.py",
                                                                      content=solution))
    assert info["verdict"] == "TOOL_OK" and "created model_new.py" in observation and reward == 0
    assert (workdir / "model_new.py").read_text() == solution
    observation, reward, terminated, truncated, info = env.step(call("read_file", path="model_new.py"))
    assert solution.strip() in observation
    observation, reward, terminated, truncated, info = env.step(call("verify"))
    assert info["command"] == "check" and info["verdict"] == "OK" and info["result"]["error_code"] == "OK"
    assert info["result"]["correct"] and len(info["result"]["trials"]) == 5 and "Correct on every input draw" in observation
    assert reward == 0 and not terminated  # final mode: the reward comes at the end
    observation, reward, terminated, truncated, info = env.step(call("submit"))
    assert terminated and not truncated and info["command"] == "submit" and info["verdict"] == "OK"
    assert reward >= 1 and info["result"]["speedup_vs_eager"] > 0 and "The episode is over." in observation
    assert info["best"]["found"] and info["best"]["candidate"] == solution  # a single file: sent as it is
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(call("list_files"))
    env.close()
    assert not workdir.exists()  # removed with the episode


def test_bad_calls_get_error_results_and_never_raise(tmp_path):
    env = WorkspaceEnv(backend="cpu", max_turns=30, max_file_chars=1000, max_files=5, workdir_root=tmp_path)
    observation, info = env.reset(options={"task_id": GELU_TASK})
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    cases = [
        ("{not json", "INVALID_ACTION", "not valid JSON"),
        ("[1, 2]", "INVALID_ACTION", 'a string "name"'),
        (call("bash", command="ls"), "INVALID_ACTION", "unknown tool 'bash'; the tools are: list_files"),
        (call("read_file"), "INVALID_ACTION", "read_file takes path: missing path"),
        (call("read_file", path="model.py", extra="x"), "INVALID_ACTION", "unknown extra"),
        (json.dumps({"name": "read_file", "arguments": {"path": 3}}), "INVALID_ACTION", "must be a string"),
        (json.dumps({"name": "read_file", "arguments": "{\"path\": "}), "INVALID_ACTION", "not valid JSON"),
        (call("read_file", path="../outside.txt"), "TOOL_ERROR", "leaves the workdir"),
        (call("read_file", path="kernels/../../outside.txt"), "TOOL_ERROR", "leaves the workdir"),
        (call("read_file", path=str(outside)), "TOOL_ERROR", "absolute paths cannot be used"),
        (call("write_file", path="../escape.py", content="x"), "TOOL_ERROR", "leaves the workdir"),
        (call("read_file", path="missing.py"), "TOOL_ERROR", "missing.py does not exist"),
        (call("write_file", path="model.py", content="x"), "TOOL_ERROR", "model.py is read-only"),
        (call("write_file", path="kernels/binding_registry.h", content="x"), "TOOL_ERROR", "read-only"),
        (call("write_file", path="model_new.py", content="x" * 1001), "TOOL_ERROR", "at most 1000"),
        (call("write_file", path="kernels", content="x"), "TOOL_ERROR", "kernels is a folder"),
        (call("edit_file", path="model.py", old="nothing like this", new=""), "TOOL_ERROR", "read-only"),
        (call("compile"), "INVALID_ACTION", "the workdir has no model_new.py"),
        (call("submit"), "INVALID_ACTION", "the workdir has no model_new.py"),
    ]
    for action, verdict, text in cases:
        observation, reward, terminated, truncated, info = env.step(action)
        assert info["verdict"] == verdict, (action, observation)
        assert text in observation, (action, observation)
        assert info["tool_error"] and not terminated and not truncated and reward == 0
    assert outside.read_text() == "secret" and not (tmp_path / "escape.py").exists()
    # edit_file: the old text must occur exactly once.
    env.step(call("write_file", path="notes.md", content="a a b"))
    _, _, _, _, info = env.step(call("edit_file", path="notes.md", old="a", new="c"))
    assert info["verdict"] == "TOOL_ERROR"
    observation, _, _, _, info = env.step(call("edit_file", path="notes.md", old="b", new="c"))
    assert info["verdict"] == "TOOL_OK" and (env.workdir / "notes.md").read_text() == "a a c"
    assert env.step(call("write_file", path="extra0.txt", content="x"))[4]["verdict"] == "TOOL_OK"
    observation, _, _, _, info = env.step(call("write_file", path="extra1.txt", content="x"))  # a 6th file
    assert info["verdict"] == "TOOL_ERROR" and "holds 5 files, the limit" in observation
    assert "extra1.txt" not in env.step(call("list_files"))[0]
    env.close()


def test_out_of_turns_without_a_judged_candidate_gets_the_failure_reward(tmp_path):
    env = WorkspaceEnv(backend="cpu", max_turns=2, workdir_root=tmp_path)
    env.reset(options={"task_id": GELU_TASK})
    assert env.step(call("list_files"))[1:4] == (0.0, False, False)
    observation, reward, terminated, truncated, info = env.step("oops")
    assert (reward, terminated, truncated) == (-1.0, False, True) and "The episode is over." in observation
    env.close()


def test_pack_workdir_round_trip_and_hash_covers_every_file():
    files = softmax_files()
    del files["kernels/softmax.cu"]
    candidate = pack_workdir(files)
    assert candidate.form == "multifile" and len(candidate.source.splitlines()) == len(
        files["model_new.py"].splitlines()) + 1
    assert unpack_files(candidate) == files
    changed = dict(files, **{"kernels/softmax.cpp": files["kernels/softmax.cpp"].replace("double s", "double  s")})
    assert pack_workdir(changed).hash != candidate.hash
    # Without kernels the candidate is model_new.py itself.
    single = solution_path(get_task(GELU_TASK), "cpu").read_text()
    assert pack_workdir({"model_new.py": single}).source == single
    # __future__ imports move onto the first line; line numbers of model_new.py stay line + 1.
    future = "from __future__ import annotations\n" + files["model_new.py"]
    packed = pack_workdir(dict(files, **{"model_new.py": future}))
    assert packed.source.startswith("from __future__ import annotations; from cuda_gym.extension")
    compile(packed.source, "candidate.py", "exec")
    with pytest.raises(InvalidCandidate, match="no model_new.py"):
        pack_workdir({"kernels/a.cpp": ""})
    with pytest.raises(InvalidCandidate, match="ModelNew"):
        pack_workdir({"model_new.py": "import torch\n"})
    with pytest.raises(ExtensionError, match="no sub-folders"):
        pack_workdir({"model_new.py": files["model_new.py"], "kernels/sub/a.cpp": "int x;"})
    with pytest.raises(ExtensionError, match="no \\*_binding.cpp"):
        pack_workdir({"model_new.py": files["model_new.py"], "kernels/a.cpp": "int x;"})
    with pytest.raises(ExtensionError, match="fixed registry"):
        pack_workdir({**files, "kernels/binding_registry.h": BINDING_REGISTRY_H + "// mine\n"})


def test_registry_rejects_bindings_that_are_not_c_abi(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_GYM_KERNEL_CACHE", str(tmp_path))
    binding = ('#include "binding_registry.h"\n'
               "REGISTER_BINDING(void, scale, (float& x)) { x *= 2.f; }\n")
    with pytest.raises(KernelSignatureError, match=r"REGISTER_BINDING void scale\(float& x\).*references"):
        load_extension({"kernels/scale_binding.cpp": binding})
    nothing = '#include "binding_registry.h"\nint helper() { return 1; }\n'
    with pytest.raises(ExtensionError, match="no entry point is registered"):
        load_extension({"kernels/empty_binding.cpp": nothing})


def test_multifile_episode_compile_error_fix_verify_profile(cpu_evaluator, tmp_path):
    env = WorkspaceEnv(backend="cpu", evaluator=cpu_evaluator, reward_mode="per_step", workdir_root=tmp_path)
    env.reset(options={"task_id": SOFTMAX_TASK})
    files = softmax_files()
    for path, text in files.items():
        assert env.step(call("write_file", path=path, content=text))[4]["verdict"] == "TOOL_OK"
    broken = files["kernels/softmax.cpp"].replace("double s = 0.0;", "double s = 0.0 +;")
    line = broken.splitlines().index("        double s = 0.0 +;") + 1
    env.step(call("write_file", path="kernels/softmax.cpp", content=broken))
    observation, reward, terminated, truncated, info = env.step(call("compile"))
    assert info["verdict"] == "COMPILE_ERROR" and reward == -1 and not terminated
    assert f"kernels/softmax.cpp:{line}:" in observation  # workdir paths, not build-cache paths
    assert "note: kernels/softmax.cu is left out" in observation
    observation, _, _, _, info = env.step(call("edit_file", path="kernels/softmax.cpp", old="double s = 0.0 +;",
                                               new="double s = 0.0;"))
    assert info["verdict"] == "TOOL_OK"
    observation, reward, _, _, info = env.step(call("compile"))
    assert info["verdict"] == "COMPILED" and reward == 0
    observation, reward, _, _, info = env.step(call("verify"))
    assert info["verdict"] == "OK" and reward == 1 and info["command"] == "check"
    assert unpack_files(info["candidate"])["kernels/softmax.cpp"] == files["kernels/softmax.cpp"]
    observation, reward, terminated, _, info = env.step(call("profile"))
    assert info["verdict"] == "OK" and info["command"] == "eval" and not terminated and reward >= 1
    assert "PyTorch eager:" in observation and "speedup" in observation
    assert "Per-kernel device times need the CUDA backend" in observation
    assert info["best"]["fully_timed"] and info["best"]["turn"] == info["turn"]
    # A runtime error in model_new.py names model_new.py's own line.
    model = files["model_new.py"].replace("        cols = x.size(-1)\n", "        cols = x.size(-1)\n        1 / 0\n")
    env.step(call("write_file", path="model_new.py", content=model))
    observation, reward, _, _, info = env.step(call("verify"))
    zero_line = model.splitlines().index("        1 / 0") + 1
    assert info["verdict"] == "RUNTIME_ERROR" and reward == -1
    assert "ZeroDivisionError" in observation and f'"model_new.py", line {zero_line}' in observation
    env.close()
