"""The peers' routes: OpenRLHF's /get_reward, TEI's /classify, /v1/embeddings, vLLM's /tokenize."""
