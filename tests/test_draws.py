"""The correctness draws (cuda_gym/eval/draws.py): a repeatable task's draws are its own
get_inputs() again with the random sources transformed where they are made, so the structure the
task builds from them stays; each draw is made again from its seed with the same values."""
from __future__ import annotations

import torch

from cuda_gym.eval.draws import draw_label, fallback_draw, make_draw


def structured_inputs():
    a = torch.triu(torch.randn(16, 16))
    s = torch.rand(16, 16)
    labels = torch.randint(0, 2, (32,)).float() * 2 - 1
    w = torch.empty(8, requires_grad=True)
    torch.nn.init.uniform_(w, 0.5, 1.5)  # Tensor.uniform_ on a leaf that requires grad
    return [a, (s + s.T) / 2, labels, w.detach(), 3]


def test_every_draw_keeps_the_structure_the_task_builds():
    base = structured_inputs()
    for index in range(1, 10):
        draw = make_draw(base, index, 7, "cpu", structured_inputs)
        a, s, labels, w, n = draw.inputs
        assert draw.distribution == draw_label(index)
        assert torch.equal(a, torch.triu(a)), draw.distribution
        assert torch.equal(s, s.T), draw.distribution
        assert set(labels.tolist()) <= {-1.0, 1.0}, draw.distribution  # randint is not transformed
        assert n == 3 and not torch.equal(a, base[0])


def test_the_sources_are_negated_scaled_and_centred():
    # Draws 1-4 share no seed, so each is compared with a plain draw of the same seed.
    seed = 11
    for index, check in [(2, lambda t, p: torch.equal(t, -p)), (3, lambda t, p: torch.allclose(t, 3 * p)),
                         (4, lambda t, p: abs(float(t.mean())) < 1e-5 and torch.allclose(t, p - p.mean()))]:
        draw = make_draw([], index, seed, "cpu", lambda: [torch.rand(64, 64)])
        plain = fallback_draw([], seed * 1_000_003 + index, "cpu", lambda: [torch.rand(64, 64)])
        assert check(draw.inputs[0], plain.inputs[0]), draw.distribution


def test_a_draw_is_made_again_with_the_same_values():
    base = structured_inputs()
    first = make_draw(base, 3, 5, "cpu", structured_inputs)
    again = make_draw(base, 3, 5, "cpu", structured_inputs)
    assert all(torch.equal(a, b) for a, b in zip(first.inputs[:4], again.inputs[:4]))
    assert torch.equal(make_draw(base, 0, 5, "cpu", structured_inputs).inputs[0], base[0])  # draw 0: the task's own


def test_an_unrepeatable_task_gets_its_inputs_rearranged():
    base = [torch.arange(12.0)]
    draw = make_draw(base, 2, 5, "cpu")
    assert draw.distribution == "negated" and draw_label(1, fresh=False) == "shuffled"
    assert sorted((-draw.inputs[0]).tolist()) == base[0].tolist()  # the same values, moved and negated
