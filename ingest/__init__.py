"""The ingest stages: read a corpus, align its words and pieces, group inputs, run the model, keep the
largest weights of each attention row, write Parquet; and the Ray engine. Installed as
``atlas.ingestion`` (``atlas.ingest`` is the API's function that runs them)."""
