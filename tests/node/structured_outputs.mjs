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
console.log(JSON.stringify(out));
