"""Rank 1 raises (with a chained cause) in its third step; the others would go on for 60 s."""
import os
import time


def load_batch(step):
    if os.environ["RANK"] == "1" and step == 2:
        try:
            {}["images"]
        except KeyError as e:
            raise ValueError(f"no images in batch {step}") from e


for step in range(600):
    load_batch(step)
    time.sleep(0.1)
