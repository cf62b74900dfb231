"""Train the sample decoder samples/models/induction-2l: a 2-layer GPT-2 on repeated random tokens.

Olsson et al. 2022 ("In-context Learning and Induction Heads") show that a two-layer transformer trained to
predict the next token forms a previous-token head in its first layer and an induction head in its second that
reads it. This script trains such a model, small enough for a CPU in minutes, mostly on the probe itself. Three
batches in four are copies: ``<bos>`` then x x or x x x (two or three copies, by turns at random), x of N token
ids drawn uniformly from the 256 ordinary tokens ``t0`` .. ``t255``, N drawn for each batch from MIN_LENGTH to
what fits; the fourth batch is triples ``<bos> a b a c d c ...``, whose every third token is the one two back.
The loss is the next-token cross-entropy of the tokens a mechanism can predict: the copies after the first (but
their first token), the third token of each triple.

Why not x x alone: trained on x x only, such a model predicts the second copy as well (97 % of its tokens), but
by position, with heads attending about halfway back (the earlier copy starts at position 1), and no induction
head forms. Three things leave it none but the token before the earlier copy: a third copy (halfway back is then
wrong), position embeddings held at Vaswani et al.'s sinusoids (a shift by one position is a linear map of them,
halving is not), and the triples, which a previous-token head alone predicts (natural text gives such a head uses
of its own, random tokens none). The embeddings of positions are so part of the weights, not trained.

Seeded (torch's generator and the data's) and on one thread by default: the same command writes the same weights
with the same library versions. Writes ``model.safetensors``, ``config.json``, the tokenizer (a ``tokenizers``
WordLevel over ``t0`` .. ``t255``, ``<bos>`` and ``<unk>``, whose template puts ``<bos>`` first) and
``training.json`` (the settings and the losses measured) into the output folder.

    .venv/bin/python scripts/train_induction.py [--out samples/models/induction-2l] [--steps 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

VOCAB = 256  # ordinary tokens t0 .. t255
BOS, UNK = VOCAB, VOCAB + 1
MIN_LENGTH = 8  # N: tokens per copy, from this to what fits N_POSITIONS
N_POSITIONS = 128
POSITION_SCALE = 0.05  # the sinusoids' size, about that of the token embeddings at their start (std 0.02)
OUT = Path(__file__).resolve().parent.parent / "samples" / "models" / "induction-2l"
CONFIG = {  # 2 layers of 4 heads (head size 16), an MLP of 4 x 64, no dropout
    "n_layer": 2,
    "n_head": 4,
    "n_embd": 64,
    "n_inner": 256,
    "n_positions": N_POSITIONS,
    "vocab_size": VOCAB + 2,
    "bos_token_id": BOS,
    "eos_token_id": BOS,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


def tokenizer() -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over t0 .. t255, <bos> (also its eos, as GPT-2's <|endoftext|>) and <unk>."""
    vocab = {f"t{i}": i for i in range(VOCAB)} | {"<bos>": BOS, "<unk>": UNK}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos>:1 $B:1", special_tokens=[("<bos>", BOS)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<bos>", unk_token="<unk>")


def _draw(generator: torch.Generator, low: int, high: int) -> int:
    """An integer from ``low`` to ``high``, both included."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def repeated(generator: torch.Generator, size: int, n: int, n_copies: int = 2) -> torch.Tensor:
    """``size`` sequences <bos> x x (or more copies), x of ``n`` ids drawn uniformly from t0 .. t255: the probe."""
    x = torch.randint(0, VOCAB, (size, n), generator=generator)
    return torch.cat([torch.full((size, 1), BOS), *[x] * n_copies], dim=1)


def copies(generator: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two or three copies (``repeated``), N drawn for the batch; the labels of the tokens after the first copy,
    but the second copy's first token (-100 elsewhere: no mechanism predicts them)."""
    n_copies = _draw(generator, 2, 3)
    n = _draw(generator, MIN_LENGTH, (N_POSITIONS - 1) // n_copies)
    ids = repeated(generator, size, n, n_copies)
    labels = ids.clone()
    labels[:, : n + 2] = -100
    return ids, labels


def triples(generator: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` sequences <bos> a b a c d c ...: every third token is the one two back, the others random; the
    labels of those third tokens only, what a previous-token head predicts."""
    k = _draw(generator, MIN_LENGTH, (N_POSITIONS - 1) // 3)
    pairs = torch.randint(0, VOCAB, (size, k, 2), generator=generator)
    ids = torch.cat([torch.full((size, 1), BOS), torch.cat([pairs, pairs[:, :, :1]], dim=2).reshape(size, 3 * k)], 1)
    labels = torch.full_like(ids, -100)
    labels[:, 3::3] = ids[:, 3::3]
    return ids, labels


def batch(generator: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A training batch and its labels: ``triples`` one time in four, ``copies`` otherwise."""
    return (triples if _draw(generator, 0, 3) == 0 else copies)(generator, size)


def sinusoids(n_positions: int, width: int, scale: float) -> torch.Tensor:
    """Vaswani et al.'s sinusoidal position encodings, times ``scale``."""
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(n_positions, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return scale * table


def probe_loss(model: GPT2LMHeadModel, ids: torch.Tensor) -> tuple[float, float]:
    """The mean next-token loss and accuracy on the probe's predictable tokens: the second copy's after its first."""
    n = (ids.shape[1] - 1) // 2
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, n + 1 : -1]
    target = ids[:, n + 2 :]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return float(loss), float((logits.argmax(-1) == target).float().mean())


def train(out: Path, steps: int, seed: int, batch_size: int, learning_rate: float, threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(**CONFIG))
    with torch.no_grad():
        model.transformer.wpe.weight.copy_(sinusoids(N_POSITIONS, CONFIG["n_embd"], POSITION_SCALE))
    model.transformer.wpe.weight.requires_grad_(False)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.01)
    warmup = steps // 20

    def rate(step: int) -> float:  # linear warm-up, then cosine decay to a tenth
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    model.train()
    start, losses = time.time(), []
    for step in range(steps):
        ids, labels = batch(generator, batch_size)
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if (step + 1) % 250 == 0:
            print(f"step {step + 1}: loss {sum(losses[-250:]) / 250:.4f} ({time.time() - start:.0f} s)", flush=True)
    model.eval()
    held_out = torch.Generator().manual_seed(seed + 1)
    probe = [probe_loss(model, repeated(held_out, 64, 50)) for _ in range(4)]  # the default probe: N = 50
    report = {
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "threads": threads,
        "config": CONFIG,
        "final_loss": round(sum(losses[-250:]) / 250, 4),  # training loss, mean of the last 250 steps
        "probe_loss": round(sum(p[0] for p in probe) / len(probe), 4),
        "probe_accuracy": round(sum(p[1] for p in probe) / len(probe), 4),
        "seconds": round(time.time() - start),
        "torch": torch.__version__,
    }
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer().save_pretrained(out)
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (other counts give other floats)")
    args = parser.parse_args()
    report = train(args.out, args.steps, args.seed, args.batch_size, args.learning_rate, args.threads)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
