"""The HTTP server: FastAPI app, OpenAI and Anthropic routes, SSE, chat template and tool-call
parsing, metrics. Imports from the engine only its client (strata.engine.client), the plain data
of strata.types and the tokenizer; never torch model code, which lives in the engine process."""
