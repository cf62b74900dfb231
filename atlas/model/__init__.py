"""The model layer, below the ingest and the analyses: the families it takes, one row each (``families``), loading
(``load``), a model's identity told without loading it (``identity``), encoder or decoder and special-token roles
(``kinds``), attention capture (``capture``) and head interventions (``intervene``)."""
