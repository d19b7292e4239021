"""Surfaces for other programs, each a thin layer over one `RetrievalService`:

- `http`: the JSON API (`clef-pipelines api`): /v1/retrieve, /v1/answer, /v1/compact,
  /v1/collections, and an OpenAI-compatible /v1/chat/completions that compacts context;
- `mcp_server`: the same operations as MCP tools (`clef-pipelines mcp`).

The LangChain and LlamaIndex adapters are in `clef_pipelines.integrations`.
"""
