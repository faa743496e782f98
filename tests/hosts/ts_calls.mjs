// A host built on the TypeScript MCP SDK that calls tools: starts the server given on the command
// line over stdio, reads a JSON list of calls ({"tool", "arguments"}) on stdin, makes them in order
// as its first requests (no pause), and prints each answer ({isError, structuredContent, text}) as JSON.
// An argument written "$N.a.b" is replaced by answer N's structuredContent.a.b (an id saved before).
// The server inherits this process's environment (its vault and passphrase).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const calls = JSON.parse(input);
const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "squirrel-mcp-ts-host-calls", version: "1.0.0" });
await client.connect(transport);
const answers = [];
const earlier = (value) => {
  if (typeof value !== "string" || !/^\$\d+\./.test(value)) return value;
  const [at, ...path] = value.slice(1).split(".");
  return path.reduce((found, key) => found[key], answers[Number(at)].structuredContent);
};
for (const { tool, arguments: given } of calls) {
  const toolArguments = Object.fromEntries(Object.entries(given).map(([key, value]) => [key, earlier(value)]));
  const result = await client.callTool({ name: tool, arguments: toolArguments });
  const first = result.content?.[0];
  answers.push({
    isError: result.isError === true,
    structuredContent: result.structuredContent ?? null,
    text: first && first.type === "text" ? first.text : "",
  });
}
await client.close();
process.stdout.write(JSON.stringify(answers));
