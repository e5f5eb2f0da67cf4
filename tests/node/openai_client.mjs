// Drives `hotcold serve`'s /v1 API with the official openai client for Node.js and prints what came
// back as one JSON object (tests/launcher/test_openai.cpp compares it with `hotcold run`).
// Environment: HOTCOLD_BASE_URL (http://127.0.0.1:PORT/v1), HOTCOLD_API_KEY, HOTCOLD_MODEL.
import OpenAI from 'openai';

const baseURL = process.env.HOTCOLD_BASE_URL, apiKey = process.env.HOTCOLD_API_KEY, model = process.env.HOTCOLD_MODEL;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }];
const out = {};

const whole = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
out.chat = { text: whole.choices[0].message.content, role: whole.choices[0].message.role, finish: whole.choices[0].finish_reason, usage: whole.usage, object: whole.object };

const stream = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
out.chat_stream = { text: '', chunks: 0, finish: null, usage: null, role: null };
for await (const chunk of stream) {
  out.chat_stream.chunks++;
  if (chunk.usage) out.chat_stream.usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta.role) out.chat_stream.role = c.delta.role;
    if (c.delta.content) out.chat_stream.text += c.delta.content;
    if (c.finish_reason) out.chat_stream.finish = c.finish_reason;
  }
}

const completion = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0.8, seed: 7 });
out.completion = { text: completion.choices[0].text, finish: completion.choices[0].finish_reason, usage: completion.usage };

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

// Errors come back as the client's typed errors.
async function status(promise) {
  try {
    await promise;
    return 200;
  } catch (e) {
    return e.status ?? String(e);
  }
}
out.wrong_key = await status(new OpenAI({ baseURL, apiKey: 'not-the-key-0123456789', maxRetries: 0 }).chat.completions.create({ model, messages, max_tokens: 2 }));
out.unknown_model = await status(client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 2 }));
out.bad_value = await status(client.chat.completions.create({ model, messages, max_tokens: 2, temperature: 7 }));

// Log probabilities: a chat's, whole and streamed; a completion's with echo (the prompt's too).
const lp = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
out.chat_logprobs = { text: lp.choices[0].message.content, content: lp.choices[0].logprobs.content };
const lps = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
out.chat_logprobs_stream = [];
for await (const chunk of lps) for (const c of chunk.choices) if (c.logprobs?.content) out.chat_logprobs_stream.push(...c.logprobs.content);
const echo = await client.completions.create({ model, prompt: [1, 9038, 2501, 263, 931], max_tokens: 1, temperature: 0, logprobs: 3, echo: true });
out.echo = { text: echo.choices[0].text, logprobs: echo.choices[0].logprobs };
// As evaluation harnesses score a continuation: max_tokens 0, the prompt's log probabilities alone.
const scored = await client.completions.create({ model, prompt: [1, 9038, 2501, 263, 931], max_tokens: 0, temperature: 0, logprobs: 1, echo: true });
out.scored = { text: scored.choices[0].text, logprobs: scored.choices[0].logprobs, usage: scored.usage };
out.top_without_logprobs = await status(client.chat.completions.create({ model, messages, max_tokens: 2, top_logprobs: 2 }));

// Embeddings (serve --embeddings): the client asks for base64 and decodes it; floats asked for too.
const emb = await client.embeddings.create({ model, input: ['Hello world', 'Once upon a time'] });
out.embeddings = { vectors: emb.data.map((d) => d.embedding), index: emb.data.map((d) => d.index), usage: emb.usage };
const embt = await client.embeddings.create({ model, input: [[1, 15043, 3186]], encoding_format: 'float' });
out.embedding_of_tokens = embt.data[0].embedding;

// A stream the client abandons after its first piece: the server cancels the sequence.
const controller = new AbortController();
const long = await client.chat.completions.create({ model, messages, max_tokens: 4000, temperature: 0, stream: true }, { signal: controller.signal });
out.aborted_after = 0;
try {
  for await (const chunk of long) {
    if (chunk.choices[0]?.delta?.content) {
      out.aborted_after++;
      controller.abort();
      break;  // pieces already read from the socket would still come out of the iterator
    }
  }
} catch (e) {
  out.abort_error = e.name;
}
console.log(JSON.stringify(out));
