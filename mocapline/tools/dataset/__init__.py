"""`mocapline retarget-dataset`: folders of takes -> robot motion datasets (docs/datasets.md)."""
