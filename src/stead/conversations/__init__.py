"""The conversation each model call saw, kept at a cost linear in its turns:
`keeping` stores a call's request with its record (`run.llm`, under
`App(keep_conversation=True)`, the default), `transcript` reads it back
turn by turn for `stead runs show RUN --conversation` and the run page."""
