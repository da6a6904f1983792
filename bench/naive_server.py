"""The naive reward server bench/compare.py measures against: FastAPI + transformers, one
padded forward per request, one request at a time, no batching across requests, no
prefix sharing, no cache (the shape of OpenRLHF's serve_rm).

    python bench/naive_server.py MODEL_DIR PORT [float32|bfloat16]

POST /score {"sequences": [[token ids], ...], "positions": [[readout positions], ...]}
-> {"scores": [[head output at each position], ...]}. Positions default to the last
token.
"""

from __future__ import annotations

import sys
import threading

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from transformers import AutoModelForSequenceClassification


class ScoreRequest(BaseModel):
    sequences: list[list[int]]
    positions: list[list[int]] | None = None


def create_app(model_dir: str, dtype: str = "float32") -> FastAPI:
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    pad = model.config.pad_token_id
    lock = threading.Lock()  # one forward at a time, as a single-model server runs them
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"ok": True}

    @app.post("/score")
    def score(body: ScoreRequest) -> dict:
        seqs = body.sequences
        positions = body.positions or [[len(s) - 1] for s in seqs]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        with lock, torch.inference_mode():
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            out = [model.score(hidden[row, pos]).float().tolist() for row, pos in enumerate(positions)]
        return {"scores": out}

    return app


if __name__ == "__main__":
    dtype = sys.argv[3] if len(sys.argv) > 3 else "float32"
    uvicorn.run(create_app(sys.argv[1], dtype), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
