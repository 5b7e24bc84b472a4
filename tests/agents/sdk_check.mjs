// The official Node SDKs against farebox: the Responses API (openai) and the Messages API (@anthropic-ai/sdk),
// with only the base URL and a farebox key changed. Prints one JSON object of what came back; a failure exits 1.
// Run by tests/e2e/test_node_sdks.py: FAREBOX_URL, FAREBOX_KEY, RESPONSES_MODEL, MESSAGES_MODEL.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const url = process.env.FAREBOX_URL;
const key = process.env.FAREBOX_KEY;
const weather = { name: "get_weather", description: "The weather in a city.",
  schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };
const out = {};

const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
const rModel = process.env.RESPONSES_MODEL;
const tools = [{ type: "function", name: weather.name, description: weather.description, parameters: weather.schema }];
const first = await openai.responses.create({ model: rModel, input: "Weather in Pune?", tools, tool_choice: "required",
  max_output_tokens: 200 });
const call = first.output.find((item) => item.type === "function_call");
const second = await openai.responses.create({ model: rModel, previous_response_id: first.id, tools,
  input: [{ type: "function_call_output", call_id: call.call_id, output: "31 C" }], max_output_tokens: 64 });
const stream = openai.responses.stream({ model: rModel, input: "Tell me a story.", max_output_tokens: 48 });
let deltas = "";
for await (const event of stream) if (event.type === "response.output_text.delta") deltas += event.delta;
const streamed = await stream.finalResponse();
const kept = await openai.responses.retrieve(second.id);
out.responses = { call: call.name, first: first.usage, second: second.usage, secondText: second.output_text,
  previous: kept.previous_response_id === first.id, streamedText: streamed.output_text, deltas,
  streamedUsage: streamed.usage, model: first.model };

const claude = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });
const mModel = process.env.MESSAGES_MODEL;
const cTools = [{ name: weather.name, description: weather.description, input_schema: weather.schema }];
const turn = await claude.messages.create({ model: mModel, max_tokens: 200, tools: cTools, tool_choice: { type: "any" },
  messages: [{ role: "user", content: "Weather in Goa?" }] });
const use = turn.content.find((block) => block.type === "tool_use");
const answer = await claude.messages.create({ model: mModel, max_tokens: 64, tools: cTools, messages: [
  { role: "user", content: "Weather in Goa?" }, { role: "assistant", content: turn.content },
  { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "29 C" }] }] });
const mStream = claude.messages.stream({ model: mModel, max_tokens: 48, messages: [{ role: "user", content: "Hi" }] });
let mText = "";
mStream.on("text", (text) => { mText += text; });
const final = await mStream.finalMessage();
const counted = await claude.messages.countTokens({ model: mModel, messages: [{ role: "user", content: "Hi there" }] });
out.messages = { tool: use.name, stop: turn.stop_reason, answer: answer.content[0].text, answerUsage: answer.usage,
  streamedText: final.content[0].text, text: mText, streamedUsage: final.usage, counted: counted.input_tokens,
  model: turn.model };
console.log(JSON.stringify(out));
