"""The GLUE task commands (finetune, ablate, importance, grads --task) take an encoder: a decoder is refused in
one line, not with transformers' padding traceback."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from tokenizers_helpers import gpt2_bpe, save
from transformers import AutoModel, GPT2Config

from atlas.cli import cli

TSV = "sentence\tlabel\nit is good .\t1\nit is bad and long indeed .\t0\n"


@pytest.mark.parametrize("command", ["finetune", "ablate", "importance", "grads"])
def test_a_decoder_is_refused_by_the_task_commands(tmp_path, command):
    tok = gpt2_bpe()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=64)
    AutoModel.from_config(config).save_pretrained(tmp_path / "gpt2")
    save(tok, tmp_path / "gpt2")
    data = tmp_path / "SST-2"
    data.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (data / name).write_text(TSV)
    args = [command, "--model", str(tmp_path / "gpt2"), "--task", "SST-2", "--data", str(data)]
    args += ["--out", str(tmp_path / "ckpt")] if command == "finetune" else ["--store", str(tmp_path / "store")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: --model '{tmp_path / 'gpt2'}': a decoder (causal LM); the GLUE task commands take an encoder"
    )
