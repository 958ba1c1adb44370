"""Integrations of stead with agent SDKs, each in its own subpackage with its
own extra: `stead.contrib.openai_agents` (`stead[openai-agents]`),
`stead.contrib.pydantic_ai` (`stead[pydantic-ai]`), `stead.contrib.langgraph`
(`stead[langgraph]`) and `stead.contrib.mcp` (`stead[mcp]`). Importing this
package imports no SDK."""
