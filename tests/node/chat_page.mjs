// The chat page (GET /chat of serve --http) as a person uses it, in Debian's chromium driven by
// puppeteer-core: a message typed and sent with Enter streams a reply; a second reply is stopped
// midway with Stop; a reload keeps the conversation; Clear empties it. A screenshot is written.
// Prints one JSON object: {first, first_stats, stopped_stats, after_reload, after_clear}.
// Environment: HOTCOLD_URL (the server, http://HOST:PORT), CHROMIUM (its path), SHOT (the PNG to write).
import puppeteer from 'puppeteer-core';

const base = process.env.HOTCOLD_URL;
const browser = await puppeteer.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox', '--disable-gpu'], headless: true });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1000, height: 700 });
  await page.goto(base + '/chat', { waitUntil: 'load' });
  await page.evaluate(() => localStorage.clear());
  await page.reload({ waitUntil: 'load' });
  const set = async (id, value) => page.$eval(id, (e, v) => { e.value = v; }, value);
  await set('#max-tokens', '8');
  await set('#temperature', '0');
  await page.type('#input', 'Hello there');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.body.dataset.replies === '1', { timeout: 60000 });
  const first = await page.$eval('#msg-1', (e) => e.firstChild ? e.firstChild.textContent : '');
  const firstStats = await page.$eval('#stats-1', (e) => e.textContent);
  // A long reply, stopped once some of it has come.
  await set('#max-tokens', '4000');
  await set('#temperature', '0.8');
  await page.type('#input', 'Tell me a long story');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => (document.getElementById('msg-3') || {}).textContent?.length > 20, { timeout: 60000 });
  await page.click('#stop');
  await page.waitForFunction(() => document.body.dataset.replies === '2', { timeout: 60000 });
  const stoppedStats = await page.$eval('#stats-3', (e) => e.textContent);
  await page.screenshot({ path: process.env.SHOT });
  await page.reload({ waitUntil: 'load' });
  const afterReload = await page.$$eval('.msg', (ms) => ms.map((m) => m.className.replace('msg ', '')));
  await page.click('#clear');
  const afterClear = await page.$$eval('.msg', (ms) => ms.length);
  console.log(JSON.stringify({ first, first_stats: firstStats, stopped_stats: stoppedStats, after_reload: afterReload, after_clear: afterClear }));
} finally {
  await browser.close();
}
