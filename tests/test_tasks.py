"""Task models on a tiny BERT: disabling, masking, the reused-layer sweep, importance, GLUE data, CLI."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

from atlas.catalogue import resolve, run_entry
from atlas.errors import AtlasError
from atlas.store import Store
from atlas.tasks.ablate import sweep
from atlas.tasks.classifier import encode, encoder_layers, evaluate_many, load_task_model
from atlas.tasks.glue import TASKS, load_split, metrics, read_tsv, task_spec
from atlas.tasks.importance import example_losses, head_importance, pruning_and_single_heads
from cli import cli
from ingest.intervene import Intervention, intervening
from ingest.model import default_model_path, recording

GLUE = Path(__file__).resolve().parent.parent / "samples" / "glue"
N_LAYERS, N_HEADS = 3, 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A 3-layer, 4-head BERT with random weights and the embedded model's tokenizer, saved locally."""
    path = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(path, safe_serialization=True)
    AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(path)
    return path


def _model(tiny: Path, task: str = "RTE"):
    tm = load_task_model(str(tiny), task_spec(task), seed=1)
    return tm, encode(tm, load_split(tm.spec, str(GLUE / task), "dev").head(24), batch_size=8)


def test_uniform_disabling_is_one_over_real_length(tiny):
    tm, batches = _model(tiny)
    batch = batches[0]
    mask = batch.inputs["attention_mask"]
    assert (mask == 0).any()  # the batch is padded
    with torch.inference_mode(), recording() as base:
        tm.lm.model(**batch.inputs)
    with torch.inference_mode(), intervening(Intervention(uniform={1: [0, 2]})), recording() as changed:
        tm.lm.model(**batch.inputs)
    lengths = mask.sum(dim=1)
    for row in range(mask.shape[0]):
        n = int(lengths[row])
        for head in (0, 2):
            probs = changed[1][row, head, :n]
            assert torch.allclose(probs[:, :n], torch.full((n, n), 1.0 / n))
            assert torch.all(probs[:, n:] == 0)
    assert torch.equal(changed[0], base[0])  # the layer below is untouched
    assert torch.equal(changed[1][:, [1, 3]], base[1][:, [1, 3]])  # other heads of the layer too


def test_masking_a_head_removes_its_output(tiny):
    tm, batches = _model(tiny)
    inputs = batches[0].inputs
    layer, head = 1, 2
    gates = torch.ones(N_LAYERS, N_HEADS)
    gates[layer, head] = 0.0
    with torch.inference_mode(), intervening(Intervention(gates=gates)):
        gated = tm.lm.model(**inputs).logits
    # independent: zero the columns of the output projection that read that head's context
    edited = copy.deepcopy(tm.lm.model)
    width = edited.config.hidden_size // N_HEADS
    dense = edited.base_model.encoder.layer[layer].attention.output.dense
    with torch.no_grad():
        dense.weight[:, head * width : (head + 1) * width] = 0.0
        reference = edited(**inputs).logits
    assert torch.allclose(gated, reference, atol=1e-6)
    with torch.inference_mode():
        assert not torch.allclose(tm.lm.model(**inputs).logits, reference, atol=1e-6)


@pytest.mark.parametrize("task", ["RTE", "STS-B"])
@pytest.mark.parametrize("method", ["uniform", "mask"])
def test_reused_sweep_equals_full_recomputation(tiny, task, method):
    tm, batches = _model(tiny, task)
    fast_base, fast = sweep(tm, batches, method, reuse=True)
    slow_base, slow = sweep(tm, batches, method, reuse=False)
    assert fast_base == slow_base
    assert [r["metrics"] for r in fast] == [r["metrics"] for r in slow]
    assert len(fast) == N_LAYERS * N_HEADS + N_LAYERS
    if task == "STS-B":  # a regression metric moves with any change of a prediction
        assert len({r["metrics"]["pearson"] for r in fast}) > 1


def test_reused_sweep_skips_the_lower_layers(tiny):
    tm, batches = _model(tiny, "STS-B")
    layers = encoder_layers(tm.lm.model, N_LAYERS)
    calls = [0]
    count = lambda *_: calls.__setitem__(0, calls[0] + 1)  # noqa: E731
    hooks = [layer.attention.register_forward_hook(count) for layer in layers]  # runs only if the layer computes
    plan = [(0, Intervention())] + [(2, Intervention(uniform={2: [h]})) for h in range(N_HEADS)]
    try:
        # every layer for every ablation; or the baseline once, then only layer 3 for the four ablations
        for reuse, expected in [(False, 5 * N_LAYERS), (True, N_LAYERS + N_LAYERS + N_HEADS * 1)]:
            calls[0] = 0
            evaluate_many(tm, batches[:1], plan, reuse=reuse)
            assert calls[0] == expected, reuse
    finally:
        for hook in hooks:
            hook.remove()


def test_importance_matches_finite_differences(tiny):
    tm, batches = _model(tiny)
    tm.lm.model.double()
    importance = head_importance(tm, batches)
    eps = 1e-4
    for layer, head in [(0, 1), (2, 3)]:
        grads = []
        for batch in batches:
            losses = []
            for sign in (1, -1):
                gates = torch.ones(N_LAYERS, N_HEADS, dtype=torch.float64)
                gates[layer, head] += sign * eps
                with torch.no_grad(), intervening(Intervention(gates=gates)):
                    losses.append(example_losses(tm, tm.lm.model(**batch.inputs).logits, batch.labels))
            grads.append(((losses[0] - losses[1]) / (2 * eps)).abs())
        assert importance[layer, head] == pytest.approx(torch.cat(grads).mean().item(), rel=1e-4)


def test_pruning_all_heads_equals_masking_every_head(tiny):
    tm, batches = _model(tiny)
    normalised = np.random.default_rng(0).random((N_LAYERS, N_HEADS))
    baseline, rows = pruning_and_single_heads(tm, batches, normalised)
    pruned = [r for r in rows if r["kind"] == "pruned"]
    assert [r["pruned_share"] for r in pruned] == [i / 12 for i in range(13)]  # 5 % steps of 12 heads
    assert pruned[0]["metrics"] == baseline
    gates = torch.zeros(N_LAYERS, N_HEADS)
    (all_off,) = evaluate_many(tm, batches, [(0, Intervention(gates=gates))])
    assert pruned[-1]["metrics"] == all_off
    assert len([r for r in rows if r["kind"] == "all_but_one"]) == N_LAYERS * N_HEADS


def test_glue_readers_read_every_sample_format():
    for task in ("SST-2", "MRPC", "RTE", "STS-B"):
        spec = task_spec(task)
        train = load_split(spec, str(GLUE / task), "train")
        assert len(train) == 300 and (train.text_b is None) == (task == "SST-2")
    mrpc = read_tsv(TASKS["MRPC"], GLUE / "MRPC" / "dev.tsv")  # the byte-order mark is not part of the header
    assert set(np.unique(mrpc.labels)) == {0, 1}
    assert read_tsv(TASKS["STS-B"], GLUE / "STS-B" / "dev.tsv").labels.dtype == np.float32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sentence\tlabel\nfine\t1\nbroken line\n", ":3: 1 columns, expected 2"),
        ("sentence\tlabel\nfine\t7\n", ":2: label '7' is not one of 0, 1"),
        ("text\tlabel\nfine\t1\n", ":1: header has no column 'sentence'"),
    ],
)
def test_glue_reader_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "dev.tsv"
    path.write_text(text)
    with pytest.raises(AtlasError, match=message):
        read_tsv(TASKS["SST-2"], path)


def test_metrics_equal_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    gold, pred = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    got = metrics(TASKS["MRPC"], pred, gold)
    assert got["f1"] == pytest.approx(100 * f1_score(gold, pred))
    assert got["accuracy"] == pytest.approx(100 * np.mean(gold == pred))
    x, y = rng.random(50), rng.random(50)
    got = metrics(TASKS["STS-B"], x, y)
    assert got["pearson"] == pytest.approx(100 * pearsonr(x, y)[0])
    assert got["spearman"] == pytest.approx(100 * spearmanr(x, y)[0])


def test_finetune_ablate_importance_through_the_cli(tiny, tmp_path):
    runner = CliRunner()
    store, ckpt = tmp_path / "store", tmp_path / "ckpt"
    common = ["--task", "RTE", "--data", str(GLUE / "RTE"), "--store", str(store), "--dev-limit", "16"]
    result = runner.invoke(
        cli,
        [
            "finetune",
            "--model",
            str(tiny),
            "--out",
            str(ckpt),
            "--epochs",
            "1",
            "--train-limit",
            "32",
            "--quiet",
            *common,
        ],
    )
    assert result.exit_code == 0, result.output
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "atlas_task.json").is_file()
    for command in (["ablate", "--method", "mask"], ["importance"]):
        result = runner.invoke(cli, [*command, "--model", str(ckpt), *common])
        assert result.exit_code == 0, result.output
    con = Store(store).connect()
    for name, params, rows in [
        ("glue baselines", {}, 1),
        ("head ablation", {"task": "RTE", "method": "mask"}, N_LAYERS * N_HEADS),
        ("layer ablation", {"task": "RTE", "method": "mask"}, N_LAYERS),
        ("ablation summary", {}, 1),
        ("head importance", {"task": "RTE"}, N_LAYERS * N_HEADS),
        ("pruning curve", {}, 13 + N_LAYERS),
    ]:
        entry = resolve(name)
        assert len(run_entry(con, entry, entry.bind(params))) == rows, name
    # the checkpoint reloads with the metrics it recorded
    tm = load_task_model(str(ckpt), task_spec("RTE"))
    dev = load_split(tm.spec, str(GLUE / "RTE"), "dev").head(16)
    (again,) = evaluate_many(tm, encode(tm, dev), [(0, Intervention())])
    assert again == pytest.approx(tm.info["dev_metrics"])


def test_task_errors_are_one_line(tiny, tmp_path):
    runner = CliRunner()
    for args, message in [
        (["--task", "XYZ", "--data", str(GLUE / "RTE")], "--task 'XYZ': unknown"),
        (["--task", "RTE", "--data", str(tmp_path / "nope")], "no such folder"),
        (["--task", "SST-2", "--data", str(GLUE / "RTE")], "header has no column 'sentence'"),
    ]:
        result = runner.invoke(cli, ["finetune", "--model", str(tiny), "--out", str(tmp_path / "c"), *args])
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "c").exists()
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "thesis.txt").write_text("precious")
    args = ["finetune", "--model", str(tiny), "--task", "RTE", "--data", str(GLUE / "RTE"), "--out", str(keep)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 1 and "is not a checkpoint" in result.output
    assert (keep / "thesis.txt").read_text() == "precious"
    args = ["ablate", "--model", str(tiny), "--task", "RTE", "--data", str(GLUE / "RTE"), "--no-heads", "--no-layers"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 1 and "nothing to disable" in result.output


def test_attention_gradients_equal_autograd_by_loops(tiny, tmp_path):
    """'atlas grads' (task loss) against torch.autograd.grad of the recorded attention, summed by loops."""
    runner = CliRunner()
    store = tmp_path / "store"
    data = ["--task", "RTE", "--data", str(GLUE / "RTE")]
    result = runner.invoke(cli, ["grads", "--model", str(tiny), "--limit", "8", "--store", str(store), *data])
    assert result.exit_code == 0, result.output
    entry = resolve("gradient importance")
    df = run_entry(Store(store).connect(), entry, entry.bind({}))
    assert len(df) == 3 * N_LAYERS and set(df["loss"]) == {"task:RTE"}
    # independent: one example at a time, gradients from torch.autograd.grad, sums by plain loops
    tm = load_task_model(str(tiny), task_spec("RTE"))
    dev = load_split(tm.spec, str(GLUE / "RTE"), "dev").head(8)
    sums = np.zeros((N_LAYERS, 3))
    counts = np.zeros((N_LAYERS, 3))
    sep, punct = tm.lm.tokenizer.sep_token_id, {tm.lm.tokenizer.convert_tokens_to_ids(p) for p in ".,"}
    for i in range(len(dev)):
        enc = tm.lm.tokenizer(dev.text_a[i], dev.text_b[i], truncation=True, max_length=128, return_tensors="pt")
        with intervening(Intervention(keep=True)) as seen:
            logits = tm.lm.model(**enc).logits
        loss = example_losses(tm, logits, torch.tensor([dev.labels[i]])).sum()
        grads = torch.autograd.grad(loss, seen.kept)
        ids = enc["input_ids"][0].tolist()
        for layer, g in enumerate(grads):
            g = g[0].abs().numpy()
            for k, token in enumerate(ids):
                t = 0 if token == sep else 1 if token in punct else 2
                sums[layer, t] += g[:, :, k].sum()
                counts[layer, t] += g.shape[0] * g.shape[1]
    expected = sums / counts
    for row in df.iter_rows(named=True):
        t = ["sep", "dot_comma", "other"].index(row["target"])
        assert row["mean_abs_grad"] == pytest.approx(expected[row["layer"] - 1, t], rel=1e-4)
        assert row["n_weights"] == counts[row["layer"] - 1, t]


def test_grads_with_the_mlm_loss(tiny, tmp_path):
    corpus = str(GLUE.parent / "ud" / "en_ewt-ud-dev-sample.conllu")
    runner = CliRunner()
    result = runner.invoke(cli, ["grads", "--model", str(tiny), "--corpus", corpus, "--store", str(tmp_path / "s")])
    assert result.exit_code == 1 and "no MLM head" in result.output
    mlm = tmp_path / "mlm"
    BertForMaskedLM(BertConfig.from_pretrained(tiny)).save_pretrained(mlm, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(mlm)
    args = ["grads", "--model", str(mlm), "--corpus", corpus, "--limit", "8", "--store", str(tmp_path / "s")]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    entry = resolve("gradient importance")
    df = run_entry(Store(tmp_path / "s").connect(), entry, entry.bind({}))
    assert len(df) == 3 * N_LAYERS and set(df["loss"]) == {"mlm"} and (df["mean_abs_grad"] > 0).all()
