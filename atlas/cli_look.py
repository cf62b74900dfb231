"""``atlas look``: one text's heads in an HTML page, without a corpus or a store (``atlas.look``)."""

from __future__ import annotations

from pathlib import Path

import click

from atlas.api import DEVICES, DTYPES
from atlas.cli_options import FilePath, quiet_option
from atlas.errors import AtlasError
from atlas.look import check_page, look


@click.command(name="look")
@click.argument("text")
@click.option("--model", default=None, help="HF model id or local path (default: embedded all-MiniLM-L6-v2).")
@click.option("--random-init", is_flag=True, help="Same config with fresh random weights (random baseline).")
@click.option("--seed", default=0, show_default=True, help="Seed of --random-init.")
@click.option(
    "--sparse", is_flag=True, help="Keep each row's largest weights up to 0.9 of its mass, as a default ingest does."
)
@click.option("--max-length", type=click.IntRange(min=1), default=None, help="Longest input in word pieces.")
@click.option("--layer", type=click.IntRange(min=1), default=None, help="Only this layer's --head, as a head view.")
@click.option("--head", type=click.IntRange(min=1), default=None, help="Only this head of --layer, as a head view.")
@click.option(
    "--out",
    type=FilePath(dir_okay=False),
    default=Path("look.html"),
    show_default=True,
    help="The page to write (atomically).",
)
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True, help="As atlas ingest's.")
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help="As atlas ingest's.")
@quiet_option
def look_command(
    text: str,
    model: str | None,
    random_init: bool,
    seed: int,
    sparse: bool,
    max_length: int | None,
    layer: int | None,
    head: int | None,
    out: Path,
    device: str,
    dtype: str,
    quiet: bool,
) -> None:
    """Run the model once over TEXT and write its heads as an HTML page: every layer and head as thumbnails, each
    leading to its head view (lines from each token to those it attends to; hover a token for its word, POS,
    relation and special role), or only --layer and --head. The page loads nothing from the network."""
    check_page(out, layer, head)  # before the model loads
    try:
        seen = look(
            text, model, dense=not sparse, max_length=max_length, random_init=random_init,
            seed=seed if random_init else None, device=device, dtype=dtype, progress=not quiet,
        )  # fmt: skip
    except AtlasError as exc:  # the text is this command's argument, not ingest's --text
        raise click.ClickException(exc.cli_text({"text": "TEXT"})) from None
    with seen:
        size = seen.write(out, layer, head)
        shape = seen.shape
    shown = f"layer {layer}, head {head}" if layer is not None else f"{shape[0]} layers x {shape[1]} heads"
    click.echo(f"wrote {out} ({size / 1e6:.1f} MB): {shown} over {shape[2]} tokens", err=True)
