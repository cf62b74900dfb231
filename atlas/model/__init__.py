"""The model layer, below the ingest and the analyses: loading (``load``), attention capture (``capture``)
and head interventions (``intervene``)."""
