// Structured outputs through the official openai client for Node.js: COUNT chat completions at
// temperature 1 with a response_format JSON Schema (nested objects, arrays, enums, numbers, a date,
// a reference, required fields), each output parsed and validated with ajv (a JSON Schema validator,
// formats included). On a random-weight model nothing but the grammar keeps the text valid.
// Prints one JSON object: {total, valid, failures: [first few: text and why]}.
// Environment: HOTCOLD_BASE_URL, HOTCOLD_API_KEY, HOTCOLD_MODEL, COUNT (200), CONCURRENCY (8).
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const baseURL = process.env.HOTCOLD_BASE_URL, apiKey = process.env.HOTCOLD_API_KEY, model = process.env.HOTCOLD_MODEL;
const count = Number(process.env.COUNT ?? 200), concurrency = Number(process.env.CONCURRENCY ?? 8);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

export const schema = {
  type: 'object',
  properties: {
    id: { type: 'integer', minimum: 1, maximum: 9999 },
    name: { type: 'string', minLength: 1, maxLength: 10 },
    score: { type: 'number', minimum: -1, exclusiveMaximum: 1 },
    kind: { enum: ['cat', 'dog', 'bird'] },
    born: { type: 'string', format: 'date' },
    owner: {
      type: 'object',
      properties: { first: { type: 'string', maxLength: 6 }, age: { type: 'integer', minimum: 0, maximum: 120 }, vip: { type: 'boolean' } },
      required: ['first', 'age'],
      additionalProperties: false,
    },
    tags: { type: 'array', items: { type: 'string', maxLength: 5 }, minItems: 1, maxItems: 4 },
    parent: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/ref' }] },
  },
  required: ['id', 'name', 'score', 'kind', 'owner', 'tags'],
  additionalProperties: false,
  $defs: { ref: { type: 'object', properties: { id: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['id'], additionalProperties: false } },
};

const ajv = new Ajv2020({ strict: true, allErrors: true });
addFormats(ajv);
const validate = ajv.compile(schema);

const out = { total: 0, valid: 0, finish: {}, failures: [] };
let next = 0;
async function worker() {
  while (next < count) {
    const i = next++;
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: `Describe pet number ${i} as JSON.` }],
      temperature: 1,
      seed: 1000 + i,
      max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: 'pet', schema, strict: true } },
    });
    const text = r.choices[0].message.content;
    out.total++;
    out.finish[r.choices[0].finish_reason] = (out.finish[r.choices[0].finish_reason] ?? 0) + 1;
    let why = null;
    try {
      if (!validate(JSON.parse(text))) why = ajv.errorsText(validate.errors);
    } catch (e) {
      why = String(e);
    }
    if (why === null) out.valid++;
    else if (out.failures.length < 5) out.failures.push({ text, why });
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));

// Tool calls (the server's chat template must have tools: qwen2.5): COUNT answers with tool_choice
// "required" at temperature 1, each call's name one of the tools and its arguments valid against its
// parameters; then a named call streamed, its deltas put together as a client does.
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: {
    type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 },
      unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'Add numbers', parameters: {
    type: 'object', properties: { terms: { type: 'array', items: { type: 'number', minimum: -100, maximum: 100 }, minItems: 1, maxItems: 4 } },
    required: ['terms'], additionalProperties: false } } },
];
const checks = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const calls = { total: 0, valid: 0, finish: {}, failures: [] };
next = 0;
async function caller() {
  while (next < count) {
    const i = next++;
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: `Call a tool (${i}).` }], temperature: 1, seed: 5000 + i, max_tokens: 300, tools, tool_choice: 'required',
    });
    const c = r.choices[0];
    calls.total++;
    calls.finish[c.finish_reason] = (calls.finish[c.finish_reason] ?? 0) + 1;
    let why = null;
    const made = c.message.tool_calls ?? [];
    if (made.length === 0) why = 'no tool call: ' + c.message.content;
    for (const call of made) {
      const check = checks[call.function.name];
      if (!check) why = 'unknown function ' + call.function.name;
      else {
        try {
          if (!check(JSON.parse(call.function.arguments))) why = ajv.errorsText(check.errors);
        } catch (e) {
          why = String(e);
        }
      }
    }
    if (why === null) calls.valid++;
    else if (calls.failures.length < 5) calls.failures.push({ message: c.message, why });
  }
}
await Promise.all(Array.from({ length: concurrency }, caller));
out.tools = calls;

const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Weather?' }], temperature: 1, seed: 9, max_tokens: 300, tools,
  tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false, stream: true,
});
const assembled = [];
let finish = null;
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    if (c.finish_reason) finish = c.finish_reason;
    for (const d of c.delta.tool_calls ?? []) {
      if (!assembled[d.index]) assembled[d.index] = { id: d.id, name: d.function?.name ?? '', arguments: '' };
      assembled[d.index].arguments += d.function?.arguments ?? '';
    }
  }
}
out.streamed_call = { calls: assembled, finish, valid: assembled.length === 1 && assembled[0].name === 'get_weather' && checks.get_weather(JSON.parse(assembled[0].arguments)) };
// A conversation with the call and its result goes on.
const after = await client.chat.completions.create({
  model, max_tokens: 4, tools, messages: [{ role: 'user', content: 'Weather?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo", "days": 2}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'sunny' }],
});
out.after_result = { finish: after.choices[0].finish_reason, usage: after.usage };
console.log(JSON.stringify(out));
