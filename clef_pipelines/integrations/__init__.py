"""Adapters for agent frameworks, as optional extras (`langchain`, `llamaindex`). Each is a
thin layer over the same `Retriever` and `compact` as every other surface."""
