"""``atlas look``: one text's heads in an HTML page, without a corpus or a store (``atlas.look``)."""

from __future__ import annotations

from pathlib import Path

import click

from atlas.api import DEVICES, DTYPES
from atlas.cli_options import FilePath, quiet_option
from atlas.errors import AtlasError, arg
from atlas.files import check_writable, replacing
from atlas.look import look as look_at


@click.command()
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
def look(
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
    if (layer is None) != (head is None):
        given = arg("layer") if head is None else arg("head")
        raise AtlasError(f"{given}: give {arg('layer')} and {arg('head')} together")
    given = arg("out", repr(str(out)))
    if out.suffix.lower() not in (".html", ".htm"):
        raise AtlasError(f"{given}: the page is an HTML file; name it .html")
    check_writable(out, given)
    with look_at(
        text, model, dense=not sparse, max_length=max_length, random_init=random_init,
        seed=seed if random_init else None, device=device, dtype=dtype, progress=not quiet,
    ) as seen:  # fmt: skip
        page = seen.html(layer, head)
        shape = seen.heads().weights.shape
    with replacing(out, given) as tmp:
        tmp.write_text(page, encoding="utf-8")
    shown = f"layer {layer}, head {head}" if layer is not None else f"{shape[0]} layers x {shape[1]} heads"
    click.echo(f"wrote {out} ({len(page) / 1e6:.1f} MB): {shown} over {shape[2]} tokens", err=True)
