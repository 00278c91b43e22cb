"""Run-directory file formats and their reading and writing."""
