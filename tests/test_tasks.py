"""Task models on a tiny BERT: disabling, masking, the reused-layer sweep, importance, GLUE data, CLI."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

import atlas
from atlas.catalogue import resolve, run_entry
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.readers.glue_tsv import TASKS, load_split, read_tsv, task_spec
from atlas.model.capture import recording
from atlas.model.intervene import Intervention, intervening
from atlas.model.load import default_model_path
from atlas.prerequisites import check as check_prerequisites
from atlas.store import Store
from atlas.tasks.ablate import sweep
from atlas.tasks.classifier import encode, encoder_layers, evaluate_many, load_task_model
from atlas.tasks.finetune import BertAdam, TrainSettings, subset, train, warmup_linear
from atlas.tasks.importance import example_losses, head_importance, normalise, pruned_counts, pruning_and_single_heads
from atlas.tasks.metrics import metrics

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


def released_importance(tm, batches) -> np.ndarray:
    """classifier_eval.py's calculate_head_importance, on a copy of the model run with transformers' own eager
    attention: per batch the mean loss, backward, then for every example, token and head |<dL/dctx_t, ctx_t>|
    by loops; layers but the last divided by the real tokens, the last by the examples; l2 per layer."""
    model = copy.deepcopy(tm.lm.model)
    model.config._attn_implementation = "eager"
    model.requires_grad_(True)
    layers = encoder_layers(model, N_LAYERS)
    total = np.zeros((N_LAYERS, N_HEADS))
    tot_tokens = n = 0
    for batch in batches:
        contexts: list[torch.Tensor] = []

        def keep(_module, _args, out, contexts=contexts):
            out[0].retain_grad()
            contexts.append(out[0])

        hooks = [layer.attention.self.register_forward_hook(keep) for layer in layers]
        logits = model(**batch.inputs).logits
        for hook in hooks:
            hook.remove()
        if tm.spec.labels is None:
            loss = torch.nn.functional.mse_loss(logits[:, 0], batch.labels.to(logits.dtype))
        else:
            loss = torch.nn.functional.cross_entropy(logits, batch.labels)
        loss.backward()
        for layer, ctx in enumerate(contexts):
            size, length, width = ctx.shape
            c = ctx.detach().reshape(size, length, N_HEADS, width // N_HEADS)
            g = ctx.grad.reshape(size, length, N_HEADS, width // N_HEADS)
            for b in range(size):
                for t in range(length):
                    for h in range(N_HEADS):
                        total[layer, h] += abs(float((g[b, t, h] * c[b, t, h]).sum()))
        tot_tokens += int(batch.inputs["attention_mask"].sum())
        n += size
    total[:-1] /= tot_tokens
    total[-1] /= n
    return total / (np.sqrt((total**2).sum(axis=1, keepdims=True)) + 1e-20)


@pytest.mark.parametrize("task", ["RTE", "STS-B"])
def test_importance_equals_the_released_procedure(tiny, task):
    tm, _ = _model(tiny, task)
    tm.lm.model.double()
    batches = encode(tm, load_split(tm.spec, str(GLUE / task), "train").head(24), batch_size=10)  # 10, 10, 4
    raw, n = head_importance(tm, batches)
    assert n == 24
    expected = released_importance(tm, batches)
    assert normalise(raw) == pytest.approx(expected, rel=1e-6)
    # the per-token absolute value is not the absolute value of the gate's gradient per example
    per_example = np.zeros((N_LAYERS, N_HEADS))
    for batch in batches:
        gates = torch.ones(N_LAYERS, N_HEADS, dtype=torch.float64, requires_grad=True)
        with intervening(Intervention(gates=gates)):
            loss = example_losses(tm, tm.lm.model(**batch.inputs).logits, batch.labels)
        for value in loss:
            (grad,) = torch.autograd.grad(value, gates, retain_graph=True)
            per_example += grad.abs().numpy()
    assert np.abs(normalise(per_example) - expected).max() > 1e-3


def released_pruning_sequence(importance: np.ndarray) -> list[set[tuple[int, int]]]:
    """pruning.py: determine_pruning_sequence for --prune_percent 5 10 ... 100, then what_to_prune step by step
    (heads sorted by score, the lowest not yet pruned added), importance computed once."""
    n_layers, n_heads = importance.shape
    all_n = sorted(int(n_heads * n_layers * p / 100) for p in [float(x) for x in range(5, 101, 5)])
    sequence = [all_n[0]] + [all_n[i] - all_n[i - 1] for i in range(1, len(all_n))]
    ranked = sorted(
        [((layer, head), importance[layer, head]) for layer in range(n_layers) for head in range(n_heads)],
        key=lambda x: x[1],
    )
    pruned: set[tuple[int, int]] = set()
    out = []
    for n_to_prune in sequence:
        pruned |= set([h for h, _ in ranked if h not in pruned][:n_to_prune])
        out.append(set(pruned))
    return out


def test_pruning_steps_and_order_follow_the_released_code(tiny):
    assert pruned_counts(72)[:4] == [0, 3, 7, 10]  # int(72 p / 100): 3 heads at 5 %, not round(3.6) = 4
    assert [len(s) for s in released_pruning_sequence(np.zeros((6, 12)))] == pruned_counts(72)[1:]
    tm, batches = _model(tiny, "STS-B")
    normalised = np.random.default_rng(0).random((N_LAYERS, N_HEADS))
    baseline, rows = pruning_and_single_heads(tm, batches, normalised)
    pruned = [r for r in rows if r["kind"] == "pruned"]
    assert [r["pruned_share"] for r in pruned] == [i / 12 for i in range(13)]  # K = 12: every count once
    assert pruned[0]["metrics"] == baseline
    # independent masking: zero the output projection's columns that read each pruned head
    width = tm.lm.model.config.hidden_size // N_HEADS
    expected = {}
    for heads in released_pruning_sequence(normalised):
        edited = copy.deepcopy(tm.lm.model)
        with torch.no_grad():
            for layer, head in heads:
                dense = edited.base_model.encoder.layer[layer].attention.output.dense
                dense.weight[:, head * width : (head + 1) * width] = 0.0
            preds = torch.cat([edited(**b.inputs).logits[:, 0] for b in batches]).numpy()
        expected[len(heads) / 12] = metrics(tm.spec, preds, torch.cat([b.labels for b in batches]).numpy())
    assert sorted(expected) == [i / 12 for i in range(13)]  # 5 % of 12 heads is int(0.6) = 0 heads
    for row in pruned[1:]:
        got, want = row["metrics"], expected[row["pruned_share"]]
        assert got == pytest.approx(want, rel=1e-5, nan_ok=True), row["pruned_share"]
    assert len({round(r["metrics"]["pearson"], 6) for r in pruned[:-1]}) > 6  # the steps differ
    gates = torch.zeros(N_LAYERS, N_HEADS)
    (all_off,) = evaluate_many(tm, batches, [(0, Intervention(gates=gates))])
    assert pruned[-1]["metrics"] == pytest.approx(all_off, nan_ok=True)
    assert len([r for r in rows if r["kind"] == "all_but_one"]) == N_LAYERS * N_HEADS


def released_bert_adam(groups: list[dict], lr: float, t_total: int, warmup: float):
    """pytorch_pretrained_bert/optimization.py BertAdam.step, line by line (one schedule, as the optimiser's own)."""
    state: dict = {}

    def step() -> None:
        for group in groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                st = state.setdefault(p, {"step": 0, "next_m": torch.zeros_like(p), "next_v": torch.zeros_like(p)})
                torch.nn.utils.clip_grad_norm_(p, 1.0)
                st["next_m"].mul_(0.9).add_(grad, alpha=1 - 0.9)
                st["next_v"].mul_(0.999).addcmul_(grad, grad, value=1 - 0.999)
                update = st["next_m"] / (st["next_v"].sqrt() + 1e-6)
                if group["weight_decay"] > 0.0:
                    decay_shift = group["weight_decay"] * p.data
                    decay_shift.masked_fill_(grad.eq(0), 0.0)
                    update += decay_shift
                x = st["step"] / t_total
                lr_scheduled = lr * (x / warmup if x < warmup else 1.0 - x)
                p.data.add_(-lr_scheduled * update)
                st["step"] += 1

    return step


def test_optimiser_is_the_released_bert_adam(tiny):
    tm, batches = _model(tiny)
    models = [copy.deepcopy(tm.lm.model) for _ in range(2)]

    def grouped(model):
        named = list(model.named_parameters())
        no_decay = ["bias", "LayerNorm.bias", "LayerNorm.weight"]  # run_classifier.py
        return [
            {"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
            {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
        ]

    ours = BertAdam(grouped(models[0]), 1e-3, total=6, warmup=0.3)
    reference = released_bert_adam(grouped(models[1]), 1e-3, t_total=6, warmup=0.3)
    for step in range(6):
        for model, do_step in ((models[0], ours.step), (models[1], reference)):
            model.zero_grad()
            batch = batches[step % len(batches)]
            model(**batch.inputs, labels=batch.labels).loss.backward()
            do_step()
        for (name, a), b in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (step, name)
    changed = [not torch.equal(a, b) for a, b in zip(models[0].parameters(), tm.lm.model.parameters(), strict=True)]
    assert all(changed)
    assert [warmup_linear(x, 0.1) for x in (0.0, 0.05, 0.1, 0.5)] == [0.0, 0.5, 0.9, 0.5]


def test_training_defaults_are_the_papers():
    settings = TrainSettings()
    assert (settings.epochs, settings.train_limit, settings.learning_rate, settings.warmup) == (3, None, 2e-5, 0.1)
    assert (settings.batch_size, settings.max_length) == (32, 128)


def test_training_draws_every_example_once_per_epoch(tiny, monkeypatch):
    tm, _ = _model(tiny)
    seen: list[list[str]] = []
    real = encode

    def spy(tm_, examples, batch_size=32, max_length=128):
        seen.append(list(examples.text_a))
        return real(tm_, examples, batch_size, max_length)

    monkeypatch.setattr("atlas.tasks.finetune.encode", spy)
    train_set = load_split(tm.spec, str(GLUE / "RTE"), "train")
    assert train(tm, train_set, TrainSettings(epochs=2, train_limit=50), progress=False) == 50
    assert len(seen) == 2 and seen[0] != seen[1]  # a new order every epoch
    assert sorted(seen[0]) == sorted(seen[1]) == sorted(subset(train_set, 50, 0).text_a)


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
        ("sentence\tlabel\nfine\t1\nbroken line\n", ":3: 1 tab-separated columns, expected 2 as in the header"),
        ("sentence\tlabel\nfine\t1\na tab\there\t0\n", ":3: 3 tab-separated columns, expected 2 as in the header"),
        ("sentence\tlabel\nfine\t7\n", ":2: label '7' is not one of 0, 1"),
        ("text\tlabel\nfine\t1\n", ":1: header has no column 'sentence'"),
    ],
)
def test_glue_reader_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "dev.tsv"
    path.write_text(text)
    with pytest.raises(AtlasError, match=message):
        read_tsv(TASKS["SST-2"], path)


@pytest.mark.parametrize(
    ("score", "message"),
    [
        ("nan", "score 'nan' is not from 0 to 5"),
        ("42", "score '42' is not from 0 to 5"),
        ("-0.5", "score '-0.5' is not from 0 to 5"),
        ("high", "score 'high' is not a number"),
    ],
)
def test_sts_b_scores_lie_from_0_to_5(tmp_path, score, message):
    """A NaN score gave NaN correlations that finetune stored and printed; 42 a correlation as if it were one."""
    path = tmp_path / "dev.tsv"
    path.write_text(f"sentence1\tsentence2\tscore\na\tb\t5.000\nc\td\t{score}\n")
    with pytest.raises(AtlasError, match=f":3: {message}$"):
        read_tsv(TASKS["STS-B"], path)
    shared = GLUE / "STS-B" / "dev.tsv"
    assert read_tsv(TASKS["STS-B"], shared).labels.min() >= 0 and read_tsv(TASKS["STS-B"], shared).labels.max() <= 5


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
    args = ["finetune", "--model", str(tiny), "--out", str(ckpt), "--epochs", "1", "--quiet", *common]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "atlas_task.json").is_file()
    info = load_task_model(str(ckpt), task_spec("RTE")).info
    assert info["n_train"] == 300 and info["learning_rate"] == 2e-5 and info["warmup"] == 0.1  # whole training set
    for command in (["ablate", "--method", "mask"], ["importance", "--train-limit", "16"]):
        result = runner.invoke(cli, [*command, "--model", str(ckpt), *common])
        assert result.exit_code == 0, result.output
    con = Store(store).connect()
    # importance from 16 training examples (seeded shuffle, batches of 32), the curve on 16 dev examples
    entry = resolve("head importance")
    scores = run_entry(con, entry, entry.bind({"task": "RTE"}))
    assert set(scores["n_train_examples"]) == {16}
    tm = load_task_model(str(ckpt), task_spec("RTE"))
    train = subset(load_split(tm.spec, str(GLUE / "RTE"), "train"), 16, 0)
    expected = released_importance(tm, encode(tm, train))
    got = scores.sort(["layer", "head"])["importance_normalised"].to_numpy().reshape(N_LAYERS, N_HEADS)
    assert got == pytest.approx(expected, rel=1e-4)
    entry = resolve("pruning curve")
    assert set(run_entry(con, entry, entry.bind({}))["n_dev"]) == {16}
    for name, params, rows in [
        ("glue baselines", {}, 1),
        ("head ablation", {"task": "RTE", "method": "mask"}, N_LAYERS * N_HEADS),
        ("layer ablation", {"task": "RTE", "method": "mask"}, N_LAYERS),
        ("ablation summary", {}, 1),
        ("head importance", {"task": "RTE"}, N_LAYERS * N_HEADS),
        ("pruning curve", {}, 13 + N_LAYERS),
        # the task left out: the newest task model's with such results (RTE's here)
        ("head ablation", {"method": "mask"}, N_LAYERS * N_HEADS),
        ("head importance", {}, N_LAYERS * N_HEADS),
    ]:
        entry = resolve(name)
        assert len(run_entry(con, entry, entry.bind(params))) == rows, name
    # parameters the stored results do not have are refused, naming them, not answered with no rows
    model_run = run_entry(con, resolve("head importance"), resolve("head importance").bind({"task": "RTE"}))
    other = str(model_run["model_run"][0]).replace("RTE", "MRPC")
    for name, params, message in [
        ("head ablation", {"task": "SST-2", "method": "mask"}, "no head ablations of task 'SST-2' by method 'mask'"),
        ("head ablation", {}, "no head ablations by method 'uniform' in the store"),
        ("layer ablation", {"task": "RTE"}, "no layer ablations by method 'uniform' in the store"),
        ("head ablation", {"task": "RTE", "method": "zero"}, "no head ablations by method 'zero'"),
        ("head ablation", {"task": "rte", "method": "mask", "metric": "f1"}, "asked for have no metric 'f1'"),
        ("layer ablation", {"task": "RTE", "method": "mask", "model_run": other}, f"model run '{other}' has no"),
        ("head importance", {"task": "MRPC"}, "no head importance of task 'MRPC' in the store"),
        ("head importance", {"model_run": other}, f"model run '{other}' has no head importance"),
    ]:
        entry = resolve(name)
        with pytest.raises(AtlasError, match=message):
            check_prerequisites(con, entry, entry.bind(params))
    # the store holding one method's ablations answers without a note; with both, the answer names its method
    entry = resolve("layer ablation")
    assert check_prerequisites(con, entry, entry.bind({"method": "mask"})) == []
    con.close()
    result = runner.invoke(cli, ["ablate", "--model", str(ckpt), "--no-heads", *common])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["query", "layer ablation", "--store", str(store)])
    assert result.exit_code == 0, result.output
    note = "note: these are the ablations by --param method=uniform; the model run shown also has layer ablations"
    assert note in result.stderr
    # the checkpoint reloads with the metrics it recorded
    tm = load_task_model(str(ckpt), task_spec("RTE"))
    dev = load_split(tm.spec, str(GLUE / "RTE"), "dev").head(16)
    (again,) = evaluate_many(tm, encode(tm, dev), [(0, Intervention())])
    assert again == pytest.approx(tm.info["dev_metrics"])


@pytest.mark.parametrize(
    "command, bars",
    [
        (["ablate", "--dev-limit", "8"], ["ablate RTE"]),
        (["importance", "--train-limit", "8", "--dev-limit", "8"], ["importance RTE", "prune RTE"]),
        (["grads", "--limit", "8"], ["grads"]),
    ],
)
def test_task_commands_show_a_progress_bar_on_stderr_unless_quiet(tiny, tmp_path, command, bars):
    runner = CliRunner()
    common = ["--model", str(tiny), "--task", "RTE", "--data", str(GLUE / "RTE"), "--store", str(tmp_path / "s")]
    shown = runner.invoke(cli, [*command, *common])
    quiet = runner.invoke(cli, [*command, *common, "--quiet"])
    assert shown.exit_code == 0 and quiet.exit_code == 0, shown.output + quiet.output
    for bar in bars:
        assert f"{bar}: 100%" in shown.stderr and bar not in shown.stdout
    assert "100%" not in quiet.stderr
    assert shown.stdout == quiet.stdout


def test_a_fine_tune_of_one_update_says_it_leaves_the_weights_as_loaded(tiny, tmp_path):
    """The released schedule's first update has a learning rate of 0: one update saves the weights as loaded,
    and the command line and the API say so, each in its own words."""
    common = ["--task", "RTE", "--data", str(GLUE / "RTE"), "--dev-limit", "8", "--quiet"]
    args = ["finetune", "--model", str(tiny), *common, "--store", str(tmp_path / "s")]
    loaded = load_task_model(str(tiny), task_spec("RTE")).lm.model.state_dict()
    encoder = [name for name in loaded if "classifier" not in name]

    def unchanged(out: Path) -> bool:
        saved = load_task_model(str(out), task_spec("RTE")).lm.model.state_dict()
        return all(torch.equal(loaded[name], saved[name]) for name in encoder)

    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "one"), "--epochs", "1", "--train-limit", "16"])
    assert result.exit_code == 0, result.output
    assert "note: one update:" in result.stderr and "(--epochs, --train-limit, --batch-size)" in result.stderr
    assert "Warning" not in result.stderr  # the note once, in the command line's words
    assert encoder and unchanged(tmp_path / "one")
    for i, more in enumerate([
        ["--epochs", "1", "--train-limit", "33"],  # two batches
        ["--epochs", "2", "--train-limit", "16"],  # two epochs of one batch
        ["--epochs", "1", "--train-limit", "16", "--warmup", "0"],  # no warm-up: the first update at full rate
    ]):  # fmt: skip
        result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / f"more{i}"), *more])
        assert result.exit_code == 0 and "note:" not in result.stderr, result.output
        assert not unchanged(tmp_path / f"more{i}"), more
    # a trained checkpoint's task loss: no note; one of 0 epochs, or the embedded encoder's: an untrained head's
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "zero"), "--epochs", "0"])
    assert result.exit_code == 0, result.output
    # and so do its ablation scores and importance (an encoder without a task head: a fresh one, at random)
    zero = "a checkpoint of 'atlas finetune' of 0 epochs keeps its fresh head"
    fresh = "the model's files hold no classifier.bias, classifier.weight: initialised at random"
    task = ["--task", "RTE", "--data", str(GLUE / "RTE"), "--quiet", "--store", str(tmp_path / "s")]
    for model, why in ("more0", None), ("zero", zero), (str(tiny), fresh):
        path = str(tmp_path / model) if why != fresh else model
        for command in (["grads", "--limit", "4"], ["ablate", "--dev-limit", "4", "--no-heads"],
                        ["importance", "--dev-limit", "4", "--train-limit", "4"]):  # fmt: skip
            result = CliRunner().invoke(cli, [*command, "--model", path, *task])
            assert result.exit_code == 0, result.output
            said = [line for line in result.stderr.splitlines() if line.startswith("note:")]
            if why is None:
                assert not said, result.stderr
            else:
                assert len(said) == 1 and said[0].startswith(f"note: the classification head is untrained ({why}): ")
            assert "Warning" not in result.stderr
    with pytest.warns(atlas.AtlasNote, match=r"untrained \(the model's files hold no classifier.bias, classifier"):
        done = atlas.grads(task="RTE", data=GLUE / "RTE", limit=2, progress=False, store=tmp_path / "s")
    assert done.notes and "the task loss is not a fine-tuned model's" in done.notes[0]
    with pytest.warns(atlas.AtlasNote, match=r"0 epochs keeps its fresh head\): the importance scores and the pru"):
        done = atlas.importance(tmp_path / "zero", "RTE", GLUE / "RTE", train_limit=4, dev_limit=4, progress=False,
                                store=tmp_path / "s")  # fmt: skip
    assert done.notes
    with warnings.catch_warnings():
        warnings.simplefilter("error", atlas.AtlasNote)  # a trained checkpoint: no note
        atlas.ablate(tmp_path / "more0", "RTE", GLUE / "RTE", heads=False, dev_limit=4, progress=False,
                     store=tmp_path / "s")  # fmt: skip
    with pytest.warns(atlas.AtlasNote, match=r"\(epochs, train_limit, batch_size\)"):
        done = atlas.finetune("RTE", GLUE / "RTE", tmp_path / "api", tiny, epochs=1, train_limit=8, dev_limit=8,
                              progress=False, store=tmp_path / "s")  # fmt: skip
    assert done.notes and "one update" in done.notes[0]


def test_a_mistyped_data_folder_fails_at_once_where_the_hub_is_unreachable(monkeypatch, tmp_path):
    """'nosuchdir' or 'glue/SST2' could be a hub data set: with the hub unreachable, refused at once as a folder,
    unless ``datasets`` has a data set of that name in its cache (which it reads then)."""
    import datasets

    monkeypatch.setattr("atlas.model.identity.hub_unreachable", lambda: "huggingface.co: no route")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))
    for data in ("nosuchdir", "glue/SST2"):
        with pytest.raises(AtlasError, match=rf"data='{data}': no such folder, and the hub is unreachable \(hugg"):
            load_split(task_spec("SST-2"), data, "train")
    (tmp_path / "glue___sst2" / "default" / "0.0.0" / "abc").mkdir(parents=True)  # datasets' cache layout
    with pytest.raises(AtlasError, match=r"data='glue/SST2': no such folder, and cannot load sst2/train from the hub"):
        load_split(task_spec("SST-2"), "glue/SST2", "train")  # read from the cache (here: a hollow one)


# the GLUE configurations' class names on the hub (nyu-mll/glue's dataset card), in the hub's class order
HUB_NAMES = {
    "SST-2": ["negative", "positive"],
    "MRPC": ["not_equivalent", "equivalent"],
    "RTE": ["entailment", "not_entailment"],
    "QQP": ["not_duplicate", "duplicate"],
    "QNLI": ["entailment", "not_entailment"],
    "MNLI": ["entailment", "neutral", "contradiction"],
}


@pytest.mark.parametrize("task", sorted(HUB_NAMES))
def test_a_hub_data_set_is_read_with_the_tsv_files_class_numbers(monkeypatch, task):
    """A hub data set's labels are its own class names' indices: each is mapped to the class the TSV files give
    that example (SST-2's 'positive' is its files' '1'; MNLI's hub order differs from its files')."""
    import datasets

    spec = task_spec(task)
    names = HUB_NAMES[task]
    tsv = {"negative": "0", "positive": "1", "not_equivalent": "0", "equivalent": "1", "not_duplicate": "0",
           "duplicate": "1"}  # fmt: skip
    if task == "RTE":
        tsv = {"entailment": "0", "not_entailment": "1"}
    hub_labels = [0, 1, 1, 0, len(names) - 1]
    a, b = {"SST-2": ("sentence", None), "MRPC": ("sentence1", "sentence2"), "QQP": ("question1", "question2"),
            "MNLI": ("premise", "hypothesis")}.get(task, (spec.text_a, spec.text_b))  # fmt: skip
    columns = {a: [f"text {i}" for i in range(5)], "label": hub_labels} | ({b: ["b"] * 5} if b else {})
    features = {a: datasets.Value("string"), "label": datasets.ClassLabel(names=names)}
    features |= {b: datasets.Value("string")} if b else {}
    hub = datasets.Dataset.from_dict(columns, features=datasets.Features(features))
    asked = []
    monkeypatch.setattr("atlas.model.identity.hub_unreachable", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kw: asked.append((args, kw)) or hub)
    examples = load_split(spec, "glue", "dev")
    assert asked == [(("glue", spec.hub), {"split": "validation_matched" if task == "MNLI" else "validation"})]
    assert examples.text_a == columns[a] and examples.text_b == (columns[b] if b else None)
    class_of = [tsv.get(names[i], names[i]) for i in hub_labels]  # the class as the TSV files name it
    assert [spec.labels[i] for i in examples.labels] == class_of
    unlabelled = datasets.Dataset.from_dict(columns | {"label": [0, -1, 1, 0, 0]}, features=datasets.Features(features))
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kw: unlabelled)
    with pytest.raises(AtlasError, match=rf"data='glue': {spec.hub}/validation.* has unlabelled examples"):
        load_split(spec, "glue", "dev")


def test_a_hub_data_set_whose_classes_the_tsv_files_name_is_read_too(monkeypatch):
    """A copy on the hub that names SST-2's classes as its files do ('0', '1') is read; labels that are no class
    numbers are refused in one line."""
    import datasets

    monkeypatch.setattr("atlas.model.identity.hub_unreachable", lambda: None)
    features = datasets.Features({"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=["0", "1"])})
    hub = datasets.Dataset.from_dict({"sentence": ["a", "b", "c"], "label": [1, 0, 1]}, features=features)
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kw: hub)
    assert load_split(task_spec("SST-2"), "someone/sst2", "dev").labels.tolist() == [1, 0, 1]
    words = datasets.Dataset.from_dict({"sentence": ["a"], "label": ["positive"]})
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kw: words)
    with pytest.raises(AtlasError, match=r"^data='someone/sst2': sst2/validation's labels are not class numbers$"):
        load_split(task_spec("SST-2"), "someone/sst2", "dev")


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
    assert "gradients of the RTE task loss, not Clark et al.'s masked-LM loss" in result.output
    assert "note: the classification head is untrained (the model's files hold no classifier" in result.stderr
    entry = resolve("gradient importance")
    df = run_entry(Store(store).connect(), entry, entry.bind({}))
    assert len(df) == 3 * N_LAYERS and set(df["loss"]) == {"RTE task loss, not Clark et al.'s masked-LM loss"}
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
    assert result.exit_code == 1 and "no masked-LM head" in result.output and "give --task and --data" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    mlm = tmp_path / "mlm"
    BertForMaskedLM(BertConfig.from_pretrained(tiny)).save_pretrained(mlm, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(mlm)
    args = ["grads", "--model", str(mlm), "--corpus", corpus, "--limit", "8", "--store", str(tmp_path / "s")]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "gradients of the masked-LM loss, as Clark et al." in result.output
    entry = resolve("gradient importance")
    df = run_entry(Store(tmp_path / "s").connect(), entry, entry.bind({}))
    assert len(df) == 3 * N_LAYERS and set(df["loss"]) == {"masked-LM loss, as Clark et al."}
    assert (df["mean_abs_grad"] > 0).all()


def test_task_queries_without_a_task_answer_for_the_newest_task_model_with_such_results(tmp_path):
    """Two task models (an older MRPC, a newer SST-2), each with head ablations and importance: left out, the task
    is the newest model's that has what is asked for (a metric only MRPC reports picks MRPC)."""
    from datetime import datetime

    store = Store(tmp_path / "store")
    store.create()
    models = (("MRPC__a__1", "MRPC", ("f1", "accuracy"), 1), ("SST-2__b__2", "SST-2", ("accuracy",), 2))
    for run_id, task, reported, day in models:
        n = len(reported)
        store.put(run_id, "task_models", "model", {
            "run_id": run_id, "task": task, "metric": list(reported), "value": [50.0] * n,
            "primary_metric": reported[0], "created_at": [datetime(2026, 1, day)] * n,
        }, n)  # fmt: skip
        rows = [(layer, head, metric) for layer in range(2) for head in range(2) for metric in reported]
        store.put(run_id, "ablations", "heads", {
            "run_id": run_id, "task": task, "method": "mask", "kind": "head", "layer": [r[0] for r in rows],
            "head": [r[1] for r in rows], "metric": [r[2] for r in rows], "value": 40.0, "primary_metric": reported[0],
            "baseline": 50.0, "delta": -10.0,
        }, len(rows))  # fmt: skip
        store.put(run_id, "head_scores", "importance", {
            "run_id": run_id, "analysis": "head importance", "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
            "metric": "importance", "value": 1.0,
        }, 4)  # fmt: skip
    con = store.connect()

    def answer(name: str, **params: str) -> set[str]:
        entry = resolve(name)
        bound = entry.bind({"method": "mask", **params} if "ablation" in name else params)
        check_prerequisites(con, entry, bound)
        return set(run_entry(con, entry, bound)["model_run"])

    assert answer("head ablation") == {"SST-2__b__2"}  # the newest
    assert answer("head ablation", metric="f1") == {"MRPC__a__1"}  # the newest with an f1
    assert answer("head ablation", task="mrpc") == {"MRPC__a__1"}
    assert answer("head importance") == {"SST-2__b__2"}
    assert answer("head importance", task="MRPC") == {"MRPC__a__1"}
    with pytest.raises(AtlasError, match="^the head ablations asked for have no metric 'pearson'$"):
        answer("head ablation", metric="pearson")
    with pytest.raises(AtlasError, match="^model run 'SST-2__b__2' is not a model of task 'MRPC'$"):
        answer("head ablation", task="MRPC", model_run="SST-2__b__2")


@pytest.mark.parametrize("kind", ["head", "layer"])
def test_an_ablation_entry_notes_the_other_method_of_the_model_run_it_shows(kind):
    """The note names the other method only where the run shown has it: not where an older model, or another
    task, has it (then the other method would answer for another run)."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE task_models (run_id VARCHAR, created_at TIMESTAMP)")
    con.execute("INSERT INTO task_models VALUES ('old', '2026-01-01'), ('new', '2026-02-01'), ('sst', '2026-03-01')")
    con.execute("CREATE TABLE ablations (run_id VARCHAR, task VARCHAR, method VARCHAR, kind VARCHAR, metric VARCHAR, "
                "primary_metric VARCHAR)")  # fmt: skip
    rows = [("old", "RTE", "uniform"), ("old", "RTE", "mask"), ("new", "RTE", "uniform"), ("sst", "SST-2", "mask")]
    con.executemany("INSERT INTO ablations VALUES (?, ?, ?, ?, 'acc', 'acc')", [(*r, kind) for r in rows])
    entry = resolve(f"{kind} ablation")
    for params, noted in [
        ({"task": "RTE"}, False),  # 'new' shown: uniform only ('old' has mask too)
        ({"task": "RTE", "model_run": "old"}, True),
        ({"task": "SST-2", "method": "mask"}, False),
    ]:
        notes = check_prerequisites(con, entry, entry.bind(params))
        assert bool(notes) == noted, (params, notes)
        assert not notes or "the model run shown also has" in notes[0]
