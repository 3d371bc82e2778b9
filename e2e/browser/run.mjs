#!/usr/bin/env node
// The browser test of the datasource's front end (see README.md).
//
// Expects the page built (npm run build:harness -> e2e/browser/dist); builds
// the harness server (Go) into e2e/browser/dist/harness, starts it, drives
// Debian's chromium headless through playwright-core, and checks the real
// ConfigEditor, QueryEditor (its CEL filter field) and @grafana/flamegraph
// against the real Go datasource on recorded Pyroscope answers.
//
// Exit status 0 when every check passed, 1 otherwise. Screenshots go to
// e2e/out/browser/ (gitignored), with the harness server's log.
//
// Environment: CHROMIUM (default /usr/bin/chromium), GO (default: go on
// PATH, else /usr/local/go/bin/go), HARNESS_BIN (a prebuilt harness server:
// skip go build), SLOWMO (ms between actions, for watching a headful run
// with HEADFUL=1).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dist = path.join(root, 'e2e/browser/dist');
const out = path.join(root, 'e2e/out/browser');
const fixtures = path.join(root, 'grafana-plugin/pkg/query/flame/testdata');
const testdata = path.join(root, 'e2e/browser/testdata');

const FILTER_INPUT = '[data-testid="slurmscope-filter-input"]';
const FILTER_ERROR = '[data-testid="slurmscope-filter-error"]';
const FILTER_ISSUES = '[data-testid="slurmscope-filter-issues"]';
const FILTER_SUGGESTIONS = '[data-testid="slurmscope-filter-suggestions"]';
const FILTER_UNAVAILABLE = '[data-testid="slurmscope-filter-unavailable"]';
const CONFIG_URL = '[data-testid="slurmscope-config-pyroscope-url"]';

const started = Date.now();
const since = (t) => `${((Date.now() - t) / 1000).toFixed(1)} s`;

// ------------------------------------------------------------------ checks

class CheckError extends Error {}

/** fail stops the current step with a message saying what was expected. */
function fail(msg) {
  throw new CheckError(msg);
}

function assert(cond, msg) {
  if (!cond) {
    fail(msg);
  }
}

const results = []; // { name, ok, ms, detail }

async function step(name, fn) {
  const t = Date.now();
  try {
    const detail = await fn();
    results.push({ name, ok: true, ms: Date.now() - t, detail });
    console.log(`  ok    ${name}${detail ? ` (${detail})` : ''} [${since(t)}]`);
    return true;
  } catch (e) {
    const msg = e instanceof CheckError ? e.message : e?.stack ?? String(e);
    results.push({ name, ok: false, ms: Date.now() - t, detail: msg });
    console.log(`  FAIL  ${name} [${since(t)}]\n        ${msg.replace(/\n/g, '\n        ')}`);
    return false;
  }
}

/** poll calls fn until it returns a truthy value, or fails after timeout ms with what(). */
async function poll(fn, what, timeout = 5000, every = 50) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) {
        return last;
      }
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) {
      fail(`timed out after ${timeout} ms waiting for ${typeof what === 'function' ? what(last) : what}`);
    }
    await new Promise((r) => setTimeout(r, every));
  }
}

// -------------------------------------------------------- processes, exit

let harness; // the server's ChildProcess
let browser;
let harnessLog = '';
let cleaned = false;

async function cleanup() {
  if (cleaned) {
    return;
  }
  cleaned = true;
  if (browser) {
    await browser.close().catch(() => {});
  }
  if (harness && harness.exitCode === null && harness.signalCode === null) {
    const exited = new Promise((r) => harness.once('exit', r));
    harness.kill('SIGTERM');
    const t = setTimeout(() => harness.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(t);
  }
}

// Whatever happens, the server does not outlive the test.
process.on('exit', () => {
  if (harness && harness.exitCode === null && harness.signalCode === null) {
    harness.kill('SIGKILL');
  }
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    console.error(`\n${sig}: stopping the harness and the browser`);
    cleanup().finally(() => process.exit(1));
  });
}

function which(cmd) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const p = path.join(dir, cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      // next
    }
  }
  return undefined;
}

/** buildHarness builds the Go server once per run, into dist/harness. */
function buildHarness() {
  if (process.env.HARNESS_BIN) {
    return process.env.HARNESS_BIN;
  }
  const go = process.env.GO ?? which('go') ?? '/usr/local/go/bin/go';
  const bin = path.join(dist, 'harness');
  const t = Date.now();
  const r = spawnSync(go, ['build', '-o', bin, './e2e/browser/harness'], {
    cwd: root,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { CGO_CFLAGS: '-O2 -g -Wno-deprecated-declarations', ...process.env },
  });
  if (r.error || r.status !== 0) {
    throw new Error(`go build ./e2e/browser/harness failed (${r.error?.message ?? `exit status ${r.status}`})`);
  }
  console.log(`built the harness server in ${since(t)}: ${path.relative(root, bin)}`);
  return bin;
}

/** startHarness starts the server and resolves with its base URL once it prints it. */
function startHarness(bin) {
  const logFile = fs.createWriteStream(path.join(out, 'harness.log'));
  harness = spawn(bin, ['--listen', '127.0.0.1:0', '--static', dist, '--fixtures', fixtures, '--testdata', testdata], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  harness.stderr.on('data', (b) => {
    harnessLog += b.toString();
    logFile.write(b);
  });
  harness.on('exit', () => logFile.end());
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`the harness server did not say where it listens within 20 s:\n${harnessLog}`)), 20000);
    harness.once('exit', (code, sig) => {
      clearTimeout(t);
      reject(new Error(`the harness server exited (${code ?? sig}) before listening:\n${harnessLog}`));
    });
    createInterface({ input: harness.stdout }).on('line', (line) => {
      const m = /^listening on (http:\/\/\S+)$/.exec(line);
      if (m) {
        clearTimeout(t);
        resolve(m[1]);
      }
    });
  });
}

// ------------------------------------------------------------ the fixture

/** The recorded flame graph (04a): names, root total, total per name. */
function recordedProfile() {
  const fg = JSON.parse(fs.readFileSync(path.join(fixtures, '04a-merge-stacktraces-job4242.response.json'), 'utf8')).flamegraph;
  const totals = new Map();
  for (const level of fg.levels) {
    const v = level.values.map(Number);
    for (let i = 0; i + 3 < v.length; i += 4) {
      const name = fg.names[v[i + 3]];
      totals.set(name, (totals.get(name) ?? 0) + v[i + 1]);
    }
  }
  return { total: Number(fg.total), names: fg.names, totals };
}

// Grafana formats ns durations as "18.7 s", "6.60 s", "850 ms" ...
const unitNs = { ns: 1, µs: 1e3, us: 1e3, ms: 1e6, s: 1e9, min: 60e9, hour: 3600e9, day: 86400e9 };

/** parseDuration reads the first "<number> <unit>" in text, in ns. */
function parseDuration(text) {
  const m = /([0-9]+(?:\.[0-9]+)?)\s*(ns|µs|us|ms|s|min|hour|day)\b/.exec(text);
  return m ? Number(m[1]) * unitNs[m[2]] : undefined;
}

// --------------------------------------------------------------- the page

/** typeFilter replaces the filter text by typing it, key by key. */
async function typeFilter(page, text) {
  const ta = page.locator(FILTER_INPUT);
  await ta.click();
  await page.keyboard.press('ControlOrMeta+A');
  await page.keyboard.press('Delete');
  await ta.pressSequentially(text);
}

/** validated resolves when the page has had /validate's answer for exactly text. */
function validated(page, text) {
  return quiet(page.waitForResponse(
    (r) => {
      if (!r.url().includes('/resources/validate') || r.request().method() !== 'POST') {
        return false;
      }
      try {
        return JSON.parse(r.request().postData() ?? '{}').filter === text;
      } catch {
        return false;
      }
    },
    { timeout: 10000 }
  ));
}

/**
 * quiet marks a promise that a step awaits later as handled, so that a step
 * failing before it gets there does not also crash the run with an
 * unhandled rejection; awaiting it still throws.
 */
function quiet(p) {
  p.catch(() => {});
  return p;
}

async function queryJSON(page) {
  return JSON.parse(await page.locator('[data-testid="harness-query"]').textContent());
}

/**
 * markerGeometry measures where the first error marker is, and where the
 * character at offset is in the textarea: the textarea's content box plus
 * the width of the text before it in the textarea's own font (measured on a
 * canvas, independently of the field's mirror). Line is 1-based: lines
 * above it are skipped by whole line heights (the field does not wrap
 * these short lines).
 */
function markerGeometry(page, text, offset, line) {
  return page.evaluate(
    ({ text, offset, line, FILTER_INPUT, FILTER_ERROR }) => {
      const ta = document.querySelector(FILTER_INPUT);
      const err = document.querySelector(FILTER_ERROR);
      if (!ta || !err) {
        return { missing: !ta ? 'textarea' : 'error marker' };
      }
      const cs = getComputedStyle(ta);
      const ctx = document.createElement('canvas').getContext('2d');
      ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
      const lineStart = text.lastIndexOf('\n', offset - 1) + 1;
      const before = text.slice(lineStart, offset);
      const marked = err.textContent ?? '';
      const ta_ = ta.getBoundingClientRect();
      const e = err.getBoundingClientRect();
      const lineHeight = parseFloat(cs.lineHeight);
      const left = ta_.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft) - ta.scrollLeft;
      const top = ta_.top + parseFloat(cs.borderTopWidth) + parseFloat(cs.paddingTop) - ta.scrollTop + (line - 1) * lineHeight;
      return {
        expectedX: left + ctx.measureText(before).width,
        expectedWidth: ctx.measureText(marked).width,
        expectedTop: top,
        lineHeight,
        x: e.left,
        width: e.width,
        top: e.top,
        bottom: e.bottom,
        area: { left: ta_.left, right: ta_.right, top: ta_.top, bottom: ta_.bottom },
        font: ctx.font,
        markerFont: getComputedStyle(err).fontFamily,
      };
    },
    { text, offset, line, FILTER_INPUT, FILTER_ERROR }
  );
}

const PX = 3; // how far (px) a marker may sit from where its character is

/**
 * checkInvalid types text, which has one unknown attribute `bad` on line
 * `line`, and checks the marker: its data-offset is bad's UTF-16 index,
 * data-line/-column the backend's (column in code points), its text the
 * attribute, its box over bad's characters in the textarea, and the issue
 * list says line:column.
 */
async function checkInvalid(page, text, bad, line, shot) {
  const wait = validated(page, text);
  await typeFilter(page, text);
  await page.keyboard.press('Escape');
  const res = await wait;
  const body = await res.json();
  assert(body.ok === false && body.issues?.length >= 1, `/validate said ${JSON.stringify(body)} for ${JSON.stringify(text)}`);

  const offset = text.indexOf(bad);
  const lineStart = text.lastIndexOf('\n', offset - 1) + 1;
  const column = [...text.slice(lineStart, offset)].length + 1; // code points, 1-based
  const marker = page.locator(FILTER_ERROR);
  await poll(async () => (await marker.count()) > 0, `an error marker (data-testid=slurmscope-filter-error) for ${JSON.stringify(text)}`);
  const n = await marker.count();
  assert(n === 1, `${n} error markers for one issue`);
  const attrs = await marker.evaluate((el) => ({
    offset: el.getAttribute('data-offset'),
    line: el.getAttribute('data-line'),
    column: el.getAttribute('data-column'),
    text: el.textContent,
  }));
  assert(
    attrs.offset === String(offset),
    `marker data-offset=${attrs.offset}, want ${offset}, the UTF-16 index of ${bad} in ${JSON.stringify(text)} (the backend said line ${body.issues[0].line}, column ${body.issues[0].column}, byte offset ${body.issues[0].offset})`
  );
  assert(attrs.line === String(line) && attrs.column === String(column), `marker data-line/column=${attrs.line}:${attrs.column}, want ${line}:${column}`);
  assert(attrs.text?.startsWith(bad), `marker text ${JSON.stringify(attrs.text)} does not start with ${bad}`);

  const g = await markerGeometry(page, text, offset, line);
  assert(!g.missing, `no ${g.missing} to measure`);
  const where = `marker box x=${g.x.toFixed(1)} w=${g.width.toFixed(1)} top=${g.top.toFixed(1)}; ${bad} is at x=${g.expectedX.toFixed(1)} w=${g.expectedWidth.toFixed(1)} top=${g.expectedTop.toFixed(1)} (textarea ${g.area.left.toFixed(1)}..${g.area.right.toFixed(1)}, font ${g.font})`;
  assert(Math.abs(g.x - g.expectedX) <= PX, `the marker is not over ${bad}: ${where}`);
  assert(Math.abs(g.width - g.expectedWidth) <= PX, `the marker's width is not ${bad}'s: ${where}`);
  assert(g.x >= g.area.left && g.x + g.width <= g.area.right, `the marker is outside the textarea: ${where}`);
  assert(Math.abs(g.top - g.expectedTop) <= g.lineHeight / 2 && g.bottom <= g.area.bottom + 1, `the marker is not on line ${line}: ${where}`);

  const issues = page.locator(FILTER_ISSUES);
  assert((await issues.count()) === 1, 'no issue list (data-testid=slurmscope-filter-issues)');
  const items = (await issues.locator('li').allTextContents()).map((s) => s.trim());
  assert(
    items.length === 1 && items[0].startsWith(`${line}:${column} `) && items[0].includes(bad),
    `issue list ${JSON.stringify(items)}, want one "${line}:${column} <message naming ${bad}>"`
  );
  assert((await page.locator(FILTER_INPUT).getAttribute('aria-invalid')) === 'true', 'the textarea is not aria-invalid');
  const q = await queryJSON(page);
  assert(q.filter === text, `query filter ${JSON.stringify(q.filter)}, want the typed ${JSON.stringify(text)}`);
  await shoot(page, shot);
  return `offset ${offset}, ${line}:${column}, ${Math.abs(g.x - g.expectedX).toFixed(1)} px from ${bad}`;
}

const shots = [];
async function shoot(page, name) {
  const file = path.join(out, name);
  await page.screenshot({ path: file, fullPage: true });
  shots.push(file);
}

/** One element's box only (what plugin.json's screenshots show). */
async function shootElement(locator, name) {
  const file = path.join(out, name);
  await locator.screenshot({ path: file, animations: 'disabled' });
  shots.push(file);
}

// ------------------------------------------------------------------- main

async function main() {
  if (!fs.existsSync(path.join(dist, 'index.html')) || !fs.existsSync(path.join(dist, 'harness.js'))) {
    console.error(`${path.relative(root, dist)} has no built page: run npm run build:harness first`);
    return 1;
  }
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(out, { recursive: true });

  const bin = buildHarness();
  let t = Date.now();
  const base = await startHarness(bin);
  console.log(`harness server at ${base} in ${since(t)}`);

  t = Date.now();
  const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
  // launch() gives the browser a fresh temporary profile (--user-data-dir)
  // and removes it on close.
  browser = await chromium.launch({
    executablePath,
    headless: !process.env.HEADFUL,
    slowMo: Number(process.env.SLOWMO ?? 0),
    args: [
      '--headless',
      '--no-sandbox', // CI runs as root
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ].filter((a) => a !== '--headless' || !process.env.HEADFUL),
  });
  console.log(`chromium ${browser.version()} (${executablePath}) in ${since(t)}`);
  const context = await browser.newContext({ viewport: { width: 1920, height: 1080 }, deviceScaleFactor: 1, locale: 'en-US', timezoneId: 'UTC' });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);

  // What the page says and does, for check (a) and for failures.
  const consoleErrors = [];
  const ignored = [];
  const apiErrors = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') {
      return;
    }
    const url = m.location()?.url ?? '';
    // Known noise: Grafana's web fonts (Inter, Roboto Mono) and most of its
    // icons ship with Grafana itself (public/fonts, public/build/img/icons),
    // not with the npm packages: @grafana/ui carries a subset of the icons
    // (the webpack config copies those), @grafana/flamegraph asks for
    // angle-double-up, which is not in it. The browser logs each 404 as an
    // error; the page falls back to system fonts and an empty icon.
    const p = url ? new URL(url, base).pathname : '';
    if (/^Failed to load resource: the server responded with a status of 404/.test(m.text()) && /^\/public\/(fonts|build\/img\/icons)\//.test(p)) {
      ignored.push(p);
      return;
    }
    consoleErrors.push(`${m.text()}${url ? ` (${url}:${m.location().lineNumber})` : ''}`);
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.stack ?? e.message}`));
  page.on('response', (r) => {
    if (r.url().startsWith(base + '/api/') && r.status() >= 400) {
      apiErrors.push(`${r.request().method()} ${r.url().slice(base.length)} -> ${r.status()}`);
    }
  });

  const profile = recordedProfile();

  console.log('checks:');

  // (a) the page renders, with no errors.
  const loaded = await step('a. page renders both editors with no console or page errors', async () => {
    await page.goto(base + '/', { waitUntil: 'load' });
    await page.locator(FILTER_INPUT).waitFor({ state: 'visible' });
    await page.locator(CONFIG_URL).waitFor({ state: 'visible' });
    assert((await page.locator('[data-testid="harness-crash"]').count()) === 0, 'an editor crashed: ' + (await page.locator('[data-testid="harness-crash"]').allTextContents()).join('\n'));
    // The editors' first calls (attributes, metrics, profile types).
    await page.waitForLoadState('networkidle');
    await shoot(page, 'loaded.png');
    assert(consoleErrors.length === 0, `console/page errors while loading:\n${consoleErrors.join('\n')}`);
    return `${ignored.length} known-missing asset 404s ignored`;
  });
  if (!loaded) {
    return finish(1, consoleErrors, apiErrors);
  }

  // (b) ConfigEditor: typing the Pyroscope URL updates the options.
  await step('b. ConfigEditor: typing the Pyroscope URL updates jsonData.pyroscope.url', async () => {
    const url = 'http://pyroscope.example:4040';
    const input = page.locator(CONFIG_URL);
    await input.click();
    await input.pressSequentially(url);
    const opts = await poll(
      async () => {
        const o = JSON.parse(await page.locator('[data-testid="harness-options"]').textContent());
        return o.jsonData?.pyroscope?.url === url && o;
      },
      () => `options.jsonData.pyroscope.url to be ${url}`
    );
    assert((await input.inputValue()) === url, `the URL field shows ${JSON.stringify(await input.inputValue())}`);
    await input.blur();
    await shoot(page, 'config-editor.png');
    return `jsonData.pyroscope = ${JSON.stringify(opts.jsonData.pyroscope)}`;
  });

  // (c) the filter: a valid one, an invalid one, a non-ASCII one, two lines.
  await step('c1. valid filter: no error marker, and the query has the filter', async () => {
    const text = 'slurm.job.user == "bob" && matches(slurm.job.name, "train.*")';
    const wait = validated(page, text);
    await typeFilter(page, text);
    await page.keyboard.press('Escape');
    const body = await (await wait).json();
    assert(body.ok === true, `/validate said ${JSON.stringify(body)}`);
    // Stays clean (a marker would appear right after the answer).
    const until = Date.now() + 500;
    while (Date.now() < until) {
      assert((await page.locator(FILTER_ERROR).count()) === 0, 'an error marker for a valid filter');
      assert((await page.locator(FILTER_ISSUES).count()) === 0, 'an issue list for a valid filter');
      await page.waitForTimeout(50);
    }
    assert((await page.locator(FILTER_UNAVAILABLE).count()) === 0, 'the field says the filter could not be checked');
    assert((await page.locator(FILTER_INPUT).inputValue()) === text, 'the textarea does not hold what was typed');
    const q = await queryJSON(page);
    assert(q.filter === text, `query filter ${JSON.stringify(q.filter)}, want ${JSON.stringify(text)}`);
    await shoot(page, 'filter-valid.png');
    return `filter ${JSON.stringify(q.filter)}`;
  });

  await step('c2. invalid filter: the marker sits on slurm.job.usr', async () => {
    const r = await checkInvalid(page, 'slurm.job.user == "bob" && slurm.job.usr == "x"', 'slurm.job.usr', 1, 'filter-invalid.png');
    // The editor alone, with the backend's error in place: the catalog's
    // first screenshot (a copy is src/img/screenshot-query-editor.png).
    await shootElement(page.locator('[data-testid="harness-query-editor-ui"]'), 'catalog-query-editor.png');
    return r;
  });

  await step('c3. astral character before the error: marker at the UTF-16 index', () =>
    checkInvalid(page, 'slurm.job.name == "🚀" && slurm.job.usr == "x"', 'slurm.job.usr', 1, 'filter-unicode.png')
  );

  await step('c4. error on the second line: marker on line 2', async () => {
    // Typed as two lines: Enter in the field inserts a newline when no
    // suggestion is open (Escape closes any).
    const text = 'slurm.job.user == "bob" &&\n  slurm.job.usr == "x"';
    const wait = validated(page, text);
    await typeFilter(page, 'slurm.job.user == "bob" &&');
    await page.keyboard.press('Escape');
    await page.keyboard.press('Enter');
    await page.locator(FILTER_INPUT).pressSequentially('  slurm.job.usr == "x"');
    await page.keyboard.press('Escape');
    await wait;
    // checkInvalid would retype it; the checks are the same.
    const offset = text.indexOf('slurm.job.usr');
    const marker = page.locator(FILTER_ERROR);
    await poll(async () => (await marker.count()) === 1, 'one error marker');
    const a = await marker.evaluate((el) => [el.getAttribute('data-offset'), el.getAttribute('data-line'), el.getAttribute('data-column')]);
    assert(a[0] === String(offset) && a[1] === '2' && a[2] === '3', `marker data-offset/line/column ${a.join('/')}, want ${offset}/2/3`);
    const g = await markerGeometry(page, text, offset, 2);
    const where = `marker x=${g.x.toFixed(1)} top=${g.top.toFixed(1)}, want x=${g.expectedX.toFixed(1)} top=${g.expectedTop.toFixed(1)}`;
    assert(Math.abs(g.x - g.expectedX) <= PX && Math.abs(g.top - g.expectedTop) <= g.lineHeight / 2, `the marker is not over slurm.job.usr on line 2: ${where}`);
    const items = (await page.locator(FILTER_ISSUES).locator('li').allTextContents()).map((s) => s.trim());
    assert(items.length === 1 && items[0].startsWith('2:3 '), `issue list ${JSON.stringify(items)}, want "2:3 ..."`);
    await shoot(page, 'filter-line2.png');
    return where;
  });

  // (d) suggestions: attribute names, then values (through the replay).
  await step('d1. autocompletion: slurm.job.us suggests slurm.job.user; Enter accepts it', async () => {
    await typeFilter(page, 'slurm.job.us');
    const list = page.locator(FILTER_SUGGESTIONS);
    await list.waitFor({ state: 'visible', timeout: 5000 });
    const options = list.getByRole('option');
    const labels = await options.evaluateAll((els) => els.map((el) => el.firstElementChild?.textContent ?? el.textContent));
    const i = labels.indexOf('slurm.job.user');
    assert(i >= 0, `suggestions ${JSON.stringify(labels)} lack slurm.job.user`);
    for (let k = 0; k < i; k++) {
      await page.keyboard.press('ArrowDown');
    }
    assert((await options.nth(i).getAttribute('aria-selected')) === 'true', `slurm.job.user (option ${i}) is not the selected one`);
    await shoot(page, 'autocomplete.png');
    await page.keyboard.press('Enter');
    await poll(async () => (await page.locator(FILTER_INPUT).inputValue()) === 'slurm.job.user', async () => `the textarea to read slurm.job.user, not ${JSON.stringify(await page.locator(FILTER_INPUT).inputValue())}`);
    await poll(async () => (await list.count()) === 0, 'the suggestions to close');
    await poll(async () => (await queryJSON(page)).filter === 'slurm.job.user', 'the query filter to be slurm.job.user');
    return `suggested ${JSON.stringify(labels)}`;
  });

  await step('d2. value autocompletion: slurm.job.id == " suggests the recorded job ids; Enter accepts 4243', async () => {
    await typeFilter(page, 'slurm.job.id == "');
    const list = page.locator(FILTER_SUGGESTIONS);
    await list.waitFor({ state: 'visible', timeout: 5000 });
    const options = list.getByRole('option');
    const labels = await options.evaluateAll((els) => els.map((el) => el.firstElementChild?.textContent ?? el.textContent));
    assert(JSON.stringify(labels) === JSON.stringify(['4242', '4243']), `value suggestions ${JSON.stringify(labels)}, want the recording's ["4242","4243"] (05a-select-series-by-job-id)`);
    await page.keyboard.press('ArrowDown');
    await shoot(page, 'autocomplete-values.png');
    await page.keyboard.press('Enter');
    const want = 'slurm.job.id == "4243"';
    await poll(async () => (await page.locator(FILTER_INPUT).inputValue()) === want, async () => `the textarea to read ${want}, not ${JSON.stringify(await page.locator(FILTER_INPUT).inputValue())}`);
    return want;
  });

  // (e) the flame graph of job 4242 from the recorded response.
  await step('e. flame graph: job 4242 from the recorded profile, through the real datasource', async () => {
    const text = 'slurm.job.id == "4242"';
    const wait = validated(page, text);
    await typeFilter(page, text);
    await page.keyboard.press('Escape');
    await wait;
    const queried = quiet(page.waitForResponse((r) => r.url().includes('/api/ds/query') && (r.request().postDataJSON()?.queries?.[0]?.filter ?? '') === text));
    const runsBefore = Number(await page.locator('[data-testid="harness-run-status"]').getAttribute('data-runs'));
    // Run it the QueryEditor's way, Shift+Enter in the filter (its
    // onRunQuery). Clicking harness-run would do too, but the click blurs
    // the filter, which runs the query as well, and the first of the two
    // requests is cancelled.
    await page.locator(FILTER_INPUT).press('Shift+Enter');
    const res = await queried;
    assert(res.status() === 200, `/api/ds/query answered ${res.status()}: ${res.status() === 200 ? '' : await res.text().catch((e) => e.message)}`);
    const sent = res.request().postDataJSON();
    assert(sent.queries[0].queryType === 'flamegraph' && sent.queries[0].datasource?.uid === 'slurmscope', `query sent: ${JSON.stringify(sent.queries[0])}`);
    const status = page.locator('[data-testid="harness-run-status"]');
    await poll(
      async () => Number(await status.getAttribute('data-runs')) > runsBefore && (await status.textContent()) === 'done',
      async () => `the run to finish: status ${await status.textContent()} ${await page.locator('[data-testid="harness-run-error"]').allTextContents()}`,
      15000
    );
    const flame = page.locator('[data-testid="harness-flamegraph"]');
    const canvas = flame.locator('canvas').first();
    await canvas.waitFor({ state: 'visible' });
    // The canvas has been drawn on: many non-background pixels.
    const painted = await canvas.evaluate((c) => {
      const ctx = c.getContext('2d');
      const d = ctx.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4 * 7) {
        if (d[i] > 0) {
          n++;
        }
      }
      return { n, w: c.width, h: c.height };
    });
    assert(painted.n > 500 && painted.w > 100 && painted.h > 20, `the flame graph canvas looks empty: ${JSON.stringify(painted)}`);

    // The top table names the recorded functions, with their totals.
    const distinctive = 'at::native::add_kernel<float>(at::TensorIterator&, c10::Scalar const&)';
    const rows = await poll(
      async () => {
        const r = await flame.getByRole('row').allTextContents();
        return r.some((s) => s.includes('matmul_kernel_launch')) && r;
      },
      'a table row for matmul_kernel_launch'
    );
    const tableText = rows.join('\n');
    assert(tableText.includes(distinctive), `the table lacks ${distinctive}:\n${tableText}`);
    const matmulRow = rows.find((s) => s.includes('matmul_kernel_launch'));
    const matmulNs = parseDuration(matmulRow.replace('matmul_kernel_launch', ''));
    const wantMatmul = profile.totals.get('matmul_kernel_launch');
    assert(matmulNs !== undefined && Math.abs(matmulNs - wantMatmul) <= wantMatmul * 0.01, `matmul_kernel_launch row ${JSON.stringify(matmulRow)}: want a total of ${wantMatmul / 1e9} s`);

    // The header's total is the recording's (18.7e9 ns).
    const header = await poll(async () => {
      const s = await flame.innerText();
      return /samples/.test(s) && s;
    }, 'the flame graph header with the total');
    const line = header.split('\n').find((s) => /samples/.test(s));
    const total = parseDuration(line);
    assert(total !== undefined && Math.abs(total - profile.total) <= profile.total * 0.01, `header ${JSON.stringify(line)}: want the recorded total ${profile.total / 1e9} s`);
    const samples = /([0-9.]+)\s*Bil samples/.exec(line);
    assert(!samples || Math.abs(Number(samples[1]) * 1e9 - profile.total) <= profile.total * 0.01, `header ${JSON.stringify(line)}: sample count is not the recorded total`);
    await flame.scrollIntoViewIfNeeded();
    await shoot(page, 'flamegraph.png');
    // The catalog's second screenshot (a copy is src/img/screenshot-flame-graph.png).
    await shootElement(flame, 'catalog-flame-graph.png');
    return `header ${JSON.stringify(line)}; matmul_kernel_launch ${matmulNs / 1e9} s; ${rows.length} table rows`;
  });

  // Dashboard variables: the query the datasource sends has them
  // interpolated as CEL literals (datasource.ts, interpolate.ts, against
  // the harness's TemplateSrv: job = 4242).
  await step('f. template variable: slurm.job.id == $job runs as job 4242', async () => {
    const text = 'slurm.job.id == $job';
    await typeFilter(page, text);
    await page.keyboard.press('Escape');
    await poll(async () => (await queryJSON(page)).filter === text, `the query filter to be ${text}`);
    const want = 'slurm.job.id == "4242"';
    const queried = quiet(page.waitForResponse((r) => r.url().includes('/api/ds/query')));
    await page.locator(FILTER_INPUT).press('Shift+Enter');
    const res = await queried;
    const sent = res.request().postDataJSON().queries[0].filter;
    assert(sent === want, `the query sent the filter ${JSON.stringify(sent)}, want ${JSON.stringify(want)}`);
    assert(res.status() === 200, `/api/ds/query answered ${res.status()}`);
    await poll(async () => (await page.locator('[data-testid="harness-run-status"]').textContent()) === 'done', 'the run to finish');
    await shoot(page, 'filter-variable.png');
    return `sent ${JSON.stringify(sent)}`;
  });

  // CEL has no $: the field masks variables before the backend validates,
  // so $job is not marked although the text still holds it.
  await step('f2. template variable: no error marker on $job', async () => {
    // The field validates 300 ms after the last key; give it time to mark.
    await poll(async () => (await page.locator(FILTER_ERROR).count()) > 0, 'a marker', 2000).catch(() => {});
    const n = await page.locator(FILTER_ERROR).count();
    const issues = n ? (await page.locator(FILTER_ISSUES).locator('li').allTextContents()).join('; ') : '';
    assert(n === 0, `${n} error marker(s): ${issues}`);
  });

  // (a, again) nothing went wrong along the way.
  await step('a. no console or page errors, no failed API calls during the checks', async () => {
    assert(consoleErrors.length === 0, `console/page errors:\n${consoleErrors.join('\n')}`);
    assert(apiErrors.length === 0, `failed API calls:\n${apiErrors.join('\n')}`);
    const unreplayed = harnessLog.split('\n').filter((l) => /NOT HANDLED|replay Pyroscope: \d{3} /.test(l));
    assert(unreplayed.length === 0, `the harness refused calls:\n${unreplayed.join('\n')}`);
    return `${new Set(ignored).size} known-missing Grafana assets ignored: ${[...new Set(ignored)].join(', ')}`;
  });

  return finish(results.every((r) => r.ok) ? 0 : 1, consoleErrors, apiErrors);
}

function finish(code, consoleErrors, apiErrors) {
  const passed = results.filter((r) => r.ok).length;
  console.log(`\n${passed}/${results.length} checks passed in ${since(started)}`);
  if (shots.length) {
    console.log('screenshots:');
    for (const s of shots) {
      console.log(`  ${path.relative(root, s)}`);
    }
  }
  console.log(`harness log: ${path.relative(root, path.join(out, 'harness.log'))}`);
  if (code !== 0) {
    if (consoleErrors.length) {
      console.log(`\nconsole/page errors:\n  ${consoleErrors.join('\n  ')}`);
    }
    if (apiErrors.length) {
      console.log(`\nfailed API calls:\n  ${apiErrors.join('\n  ')}`);
    }
    console.log(`\nharness log (last lines):\n  ${harnessLog.trim().split('\n').slice(-25).join('\n  ')}`);
    console.log('\nFAILED: ' + results.filter((r) => !r.ok).map((r) => r.name).join('; '));
  }
  return code;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  console.error(`\nthe test could not run: ${e?.stack ?? e}`);
  if (harnessLog) {
    console.error(`harness log:\n${harnessLog}`);
  }
  code = 1;
} finally {
  await cleanup();
}
process.exit(code);
