"""Integrations of stead with agent SDKs, each in its own subpackage with its
own extra: `stead.contrib.openai_agents` (`stead[openai-agents]`) and
`stead.contrib.pydantic_ai` (`stead[pydantic-ai]`). Importing this package
imports no SDK."""
