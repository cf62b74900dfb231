"""The catalogue: one entry per SQL file, its header the one record of what it is (see atlas.catalogue)."""
