"""What atlas asks of the store's runs, as SQL written once for every reader: the answer path on either engine
(``atlas.engine``; Spark reads these statements translated, as it reads the catalogue's) and the DuckDB shell's
macros (``atlas.macros``). Each binds the run it asks about as ``$run``.
"""

from __future__ import annotations

# the run a left-out run parameter stands for: the one ingested last (ties by run id)
LATEST_RUN = "SELECT run_id FROM runs ORDER BY created_at DESC, run_id LIMIT 1"
RUN_IDS = "SELECT run_id FROM runs"  # the ingested runs
RAN = "SELECT model, corpus FROM runs WHERE run_id = $run"  # what an ingested run ran
TASK_MODEL = "SELECT any_value(task), any_value(model) FROM task_models WHERE run_id = $run"  # a task model's run
SHAPE = "SELECT n_layers, n_heads FROM runs WHERE run_id = $run"  # its model's layers and heads
