"""Integrations of stead with agent SDKs, each in its own subpackage with its
own extra: `stead.contrib.openai_agents` (`stead[openai-agents]`),
`stead.contrib.pydantic_ai` (`stead[pydantic-ai]`), `stead.contrib.langgraph`
(`stead[langgraph]`), `stead.contrib.mcp` (`stead[mcp]`),
`stead.contrib.strands` (`stead[strands]`), `stead.contrib.google_adk`
(`stead[google-adk]`) and `stead.contrib.crewai` (`stead[crewai]`, in an environment
of its own). Importing this
package imports no SDK."""
