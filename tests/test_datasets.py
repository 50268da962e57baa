"""KernelBench and Ops-6K readers: the layouts users have, through gym.make and load_suite."""
from __future__ import annotations

import sys

import gymnasium as gym
import pytest

import cuda_gym  # noqa: F401  (registers the IDs)
from cuda_gym.tasks import get_task, load_suite
from cuda_gym.tasks import kernelbench, ops6k
from cuda_gym.tasks.kernelbench import DataNotFoundError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Real-world quirks the readers must keep intact: integer inputs, tuple outputs, buffers, CPU inputs.
MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a single square matrix multiplication (C = A * B)"""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 64


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []  # No special initialization inputs needed
'''
ARGMAX_TUPLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.register_buffer("offset", torch.arange(16, dtype=torch.float32))

    def forward(self, x, k):
        values, indices = torch.max(x + self.offset, dim=self.dim)
        return values * k, indices


def get_inputs():
    return [torch.randn(8, 16), 3]


def get_init_inputs():
    return [1]
'''
EMBEDDING_INT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num, dim):
        super().__init__()
        self.embedding = nn.Embedding(num, dim)

    def forward(self, idx):
        return self.embedding(idx).relu()


def get_inputs():
    return [torch.randint(0, 100, (4, 12))]


def get_init_inputs():
    return [100, 32]
'''

KB_FILES = {
    1: {"1_Square_matrix_multiplication_": MATMUL, "12_Argmax_with_offset": ARGMAX_TUPLE},
    2: {"3_Embedding_ReLU": EMBEDDING_INT},
    3: {"5_MLP": MATMUL.replace("square matrix multiplication", "tiny MLP")},
}


@pytest.fixture
def no_data_env(monkeypatch):
    monkeypatch.delenv(kernelbench.ENV_VAR, raising=False)
    monkeypatch.delenv(ops6k.ENV_VAR, raising=False)


def write_kernelbench_checkout(root):
    for level, files in KB_FILES.items():
        folder = root / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True)
        for name, code in files.items():
            (folder / f"{name}.py").write_text(code)
    (root / "README.md").write_text("KernelBench\n")
    return root


def write_kernelbench_parquet(root):
    (root / "data").mkdir(parents=True)
    for level, files in KB_FILES.items():
        rows = []
        for name, code in files.items():
            problem_id = int(name.split("_", 1)[0])
            # The first row of level 1 has its name without the number prefix: the reader adds it back.
            shown = name.split("_", 1)[1] if (level == 1 and problem_id == 1) else name
            rows.append({"code": code, "level": level, "name": shown, "problem_id": problem_id})
        pq.write_table(pa.Table.from_pylist(rows), root / "data" / f"level_{level}-00000-of-00001.parquet")
    return root


def expected_ids():
    return sorted(f"kernelbench/L{level}/{name}" for level, files in KB_FILES.items() for name in files)


def test_kernelbench_checkout_layout(tmp_path):
    root = write_kernelbench_checkout(tmp_path / "KernelBench-repo")
    tasks = load_suite("kernelbench", data_path=root)
    assert [t.id for t in tasks] == expected_ids()
    by_id = {t.id: t for t in tasks}
    task = by_id["kernelbench/L1/1_Square_matrix_multiplication_"]
    assert task.source == MATMUL and task.level == 1 and task.name == "1_Square_matrix_multiplication_"
    assert task.sizes == {} and task.sizes_for("cpu") == {} and task.sizes_for("cuda") == {}
    assert by_id["kernelbench/L1/12_Argmax_with_offset"].source == ARGMAX_TUPLE
    # The inner KernelBench/ folder works too, and levels filter.
    inner = load_suite("kernelbench", data_path=root / "KernelBench", levels=(2,))
    assert [t.id for t in inner] == ["kernelbench/L2/3_Embedding_ReLU"]
    assert get_task("kernelbench/L3/5_MLP", data_path=root).level == 3


def test_kernelbench_parquet_layout_gives_the_same_tasks(tmp_path):
    folder_tasks = load_suite("kernelbench", data_path=write_kernelbench_checkout(tmp_path / "repo"))
    hf_root = write_kernelbench_parquet(tmp_path / "hf")
    parquet_tasks = load_suite("kernelbench", data_path=hf_root)
    assert [(t.id, t.source, t.level) for t in parquet_tasks] == [(t.id, t.source, t.level) for t in folder_tasks]
    single = load_suite("kernelbench", data_path=hf_root / "data" / "level_2-00000-of-00001.parquet")
    assert [t.id for t in single] == ["kernelbench/L2/3_Embedding_ReLU"]


def test_kernelbench_through_gym_make_and_the_env_var(tmp_path, monkeypatch):
    root = write_kernelbench_parquet(tmp_path / "hf")
    env = gym.make("CudaKernel-L1-v1", data_path=str(root), backend="cpu")
    assert sorted(t.id for t in env.unwrapped.tasks) == [
        "kernelbench/L1/12_Argmax_with_offset", "kernelbench/L1/1_Square_matrix_multiplication_"]
    obs, info = env.reset(seed=0, options={"task_id": "kernelbench/L1/12_Argmax_with_offset"})
    assert info["level"] == 1 and 'self.register_buffer("offset"' in obs and "overridden" not in obs
    env.close()
    monkeypatch.setenv(kernelbench.ENV_VAR, str(write_kernelbench_checkout(tmp_path / "repo")))
    env = gym.make("CudaKernel-L3-v1", backend="cpu")
    assert [t.id for t in env.unwrapped.tasks] == ["kernelbench/L3/5_MLP"]
    env.close()


def test_loaded_suites_are_cached_per_path(tmp_path):
    root = write_kernelbench_checkout(tmp_path / "repo")
    kernelbench._load_cached.cache_clear()
    load_suite("kernelbench", data_path=root)
    load_suite("kernelbench", data_path=str(root) + "/")  # the same resolved path
    info = kernelbench._load_cached.cache_info()
    assert info.misses == 1 and info.hits == 1


def ops_rows():
    relu = MATMUL.replace("torch.matmul(A, B)", "torch.relu(torch.matmul(A, B))")
    return [
        {"ops": ["torch.matmul"], "data_source": "torch#1", "code": MATMUL},
        {"ops": ["torch.matmul", "torch.relu"], "data_source": "torch#2", "code": relu},
        # duplicate of row 0 up to line endings and trailing whitespace: dropped
        {"ops": ["torch.matmul"], "data_source": "torch#1", "code": MATMUL.replace("\n", "  \r\n")},
        {"ops": "['nn.Embedding', 'torch.relu', 'torch.sum']", "data_source": "transformers", "code": EMBEDDING_INT},
        {"ops": ["torch.max"], "data_source": "torch#1", "code": ARGMAX_TUPLE},
        {"ops": ["torch.relu"], "data_source": "torch#2", "code": relu},  # exact duplicate of row 1: dropped
        {"ops": ["torch.exp"], "data_source": "torch#1", "code": "def broken(:\n"},  # unusable: skipped
    ]


def write_ops6k(path):
    """The parquet stores `ops` as text (JSON or Python list literals): one column type for all rows."""
    import json

    rows = [dict(row, ops=row["ops"] if isinstance(row["ops"], str) else json.dumps(row["ops"])) for row in ops_rows()]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_ops6k_parquet_drops_duplicates_and_sets_levels(tmp_path):
    path = write_ops6k(tmp_path / "ops6k" / "data" / "train-00000-of-00001.parquet")
    with pytest.warns(UserWarning, match="skipped 1 unusable row.*row 6"):
        tasks = load_suite("ops6k", data_path=tmp_path / "ops6k")
    assert [t.id for t in tasks] == ["ops6k/L1/0000", "ops6k/L1/0004", "ops6k/L2/0001", "ops6k/L3/0003"]
    by_id = {t.id: t for t in tasks}
    assert by_id["ops6k/L1/0000"].source == MATMUL and by_id["ops6k/L1/0000"].tags == ("torch.matmul",)
    assert by_id["ops6k/L3/0003"].tags == ("nn.Embedding", "torch.relu", "torch.sum")  # level from len(ops)
    assert by_id["ops6k/L2/0001"].description == "torch.matmul -> torch.relu (torch#2)"
    assert all(t.sizes == {} for t in tasks)
    assert ops6k.ops6k_stats(tmp_path / "ops6k") == {"rows": 7, "duplicates": 2, "skipped": 1}
    assert [t.id for t in load_suite("ops6k", data_path=tmp_path / "ops6k", levels=(1,))] == [
        "ops6k/L1/0000", "ops6k/L1/0004"]
    with pytest.warns(UserWarning):  # the file itself is another path: read (and warned about) once more
        assert len(load_suite("ops6k", data_path=path)) == 4


def test_ops6k_through_gym_make(tmp_path, monkeypatch):
    path = write_ops6k(tmp_path / "ops.parquet")
    with pytest.warns(UserWarning):
        env = gym.make("CudaKernel-Ops6K-v1", data_path=path, backend="cpu", levels=2)
    assert [t.id for t in env.unwrapped.tasks] == ["ops6k/L2/0001"]
    obs, info = env.reset(seed=1)
    assert info["task_id"] == "ops6k/L2/0001" and "torch.relu(torch.matmul(A, B))" in obs
    env.close()
    monkeypatch.setenv(ops6k.ENV_VAR, str(path))
    assert len(gym.make("CudaKernel-Ops6K-v1", backend="cpu").unwrapped.tasks) == 4


def test_ops6k_jsonl_is_read_too(tmp_path):
    import json

    path = tmp_path / "ops.jsonl"  # `ops` as JSON lists here
    path.write_text("\n".join(json.dumps(row) for row in ops_rows()[:3]) + "\n")
    tasks = load_suite("ops6k", data_path=path)
    assert [t.id for t in tasks] == ["ops6k/L1/0000", "ops6k/L2/0001"]
    assert tasks[1].tags == ("torch.matmul", "torch.relu")


def test_missing_data_says_how_to_provide_it(no_data_env, tmp_path):
    with pytest.raises(DataNotFoundError) as excinfo:
        gym.make("CudaKernel-L1-v1")
    message = str(excinfo.value)
    for needle in ("CUDA_GYM_KERNELBENCH", "data_path", "KernelBench/level1/", "git clone",
                   "huggingface-cli download --repo-type dataset ScalingIntelligence/KernelBench", "cuda_gym[data]"):
        assert needle in message
    with pytest.raises(DataNotFoundError) as excinfo:
        gym.make("CudaKernel-Ops6K-v1")
    message = str(excinfo.value)
    for needle in ("CUDA_GYM_OPS6K", "data_path", "ops, data_source, code", "huggingface-cli download"):
        assert needle in message
    with pytest.raises(DataNotFoundError, match="does not exist"):
        load_suite("kernelbench", data_path=tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataNotFoundError, match="KernelBench/level<n>/"):
        load_suite("kernelbench", data_path=tmp_path / "empty")
    assert issubclass(DataNotFoundError, FileNotFoundError)


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    root = write_kernelbench_parquet(tmp_path / "hf-no-arrow")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install 'cuda_gym\[data\]'"):
        load_suite("kernelbench", data_path=root)
