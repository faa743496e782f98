// A host built on the TypeScript MCP SDK: starts the server given on the command line over
// stdio, lists its tools and prompts, fetches every prompt, and prints what it saw as JSON.
// The server inherits this process's environment (its vault and passphrase).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, env: process.env });
const client = new Client({ name: "squirrel-mcp-ts-host-check", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const { prompts } = await client.listPrompts();
const fetched = {};
for (const prompt of prompts) {
  fetched[prompt.name] = await client.getPrompt({ name: prompt.name });
}
const capabilities = client.getServerCapabilities();
await client.close();
process.stdout.write(JSON.stringify({ tools, prompts, fetched, capabilities }));
