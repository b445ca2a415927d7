// The mocapline web viewer: one G1 per performer drawn with three.js from body poses streamed over a
// WebSocket (drawn at the display's rate, whatever the stream's), and the live ledger beside it;
// where the viewer reads the robot's LowState, the physics robot over its target (translucent).
// Everything is served by the viewer process from the installed package: nothing is fetched from
// the network.
import * as THREE from 'three';
import { OrbitControls } from '/static/vendor/three/OrbitControls.js';

const $ = (id) => document.getElementById(id);
const state = { frames: 0, poses: 0, posture: null, bodies: [], pelvis: 1, performers: 0, names: {}, ready: false, errors: [],
  measured: { updates: 0, avatar: -1, age_ms: null, mean: {}, max: {} } };
window.__viewer = state; // read by tests/test_web_viewer.py

// ---- scene ---------------------------------------------------------------------------------
const canvas = $('view');
const renderer = new THREE.WebGLRenderer({ canvas, antialias: true });
renderer.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
const scene = new THREE.Scene();
scene.background = new THREE.Color(0x1b2027);
const camera = new THREE.PerspectiveCamera(40, 1, 0.05, 100);
camera.up.set(0, 0, 1); // MuJoCo is z-up
camera.position.set(2.6, -2.6, 1.5);
const controls = new OrbitControls(camera, canvas);
controls.target.set(0, 0, 0.75);
controls.enableDamping = true;
controls.update();
scene.add(new THREE.HemisphereLight(0xdfe8ff, 0x30343a, 1.6));
const sun = new THREE.DirectionalLight(0xffffff, 1.8);
sun.position.set(3, -2, 5);
scene.add(sun);
const grid = new THREE.GridHelper(20, 40, 0x4a5360, 0x2c323b);
grid.rotation.x = Math.PI / 2; // into the xy plane
scene.add(grid);
const everyone = new THREE.Group(); // every performer's robot
scene.add(everyone);

// One G1 per performer (avatar_index), side by side along the lateral axis (MuJoCo's y; the first
// performer on the left as the camera starts), each labelled with its avatar name: the performers'
// own positions are kept, shifted by their slot.
const SPACING_M = 1.3;
// The physics robot 'beside' its target: far enough that two robots with their arms out sideways
// do not overlap on the screen from the starting camera's diagonal view.
const BESIDE_M = 1.8;
const robots = new Map(); // avatar_index -> { group, bodies, label, posture }
let template = null; // robot.json, its geometries and materials, shared by every robot

function resize() {
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.floor(w * renderer.getPixelRatio()) || canvas.height !== Math.floor(h * renderer.getPixelRatio())) {
    renderer.setSize(w, h, false);
    camera.aspect = w / Math.max(h, 1);
    camera.updateProjectionMatrix();
  }
}

async function loadRobot() {
  const desc = await (await fetch('/robot.json')).json();
  const blob = await (await fetch('/robot.bin')).arrayBuffer();
  const geometries = desc.meshes.map((m) => {
    const g = new THREE.BufferGeometry();
    g.setAttribute('position', new THREE.BufferAttribute(new Float32Array(blob, m.vert_offset, m.vert_count * 3), 3));
    g.setIndex(new THREE.BufferAttribute(new Uint32Array(blob, m.face_offset, m.face_count * 3), 1));
    g.computeVertexNormals();
    return g;
  });
  const materials = new Map();
  for (const geom of desc.geoms) {
    const key = geom.rgba.join(',');
    if (!materials.has(key)) {
      materials.set(key, new THREE.MeshStandardMaterial({ color: new THREE.Color(geom.rgba[0], geom.rgba[1], geom.rgba[2]), roughness: 0.55, metalness: 0.15 }));
    }
  }
  template = { desc, geometries, materials };
  state.pelvis = desc.pelvis;
  state.ready = true;
}

function buildG1(material) {
  const { desc, geometries, materials } = template;
  const group = new THREE.Group();
  const bodies = desc.bodies.map(() => { const b = new THREE.Group(); group.add(b); return b; });
  for (const geom of desc.geoms) {
    const mesh = new THREE.Mesh(geometries[geom.mesh], material || materials.get(geom.rgba.join(',')));
    mesh.position.set(...geom.pos);
    mesh.quaternion.set(geom.quat[1], geom.quat[2], geom.quat[3], geom.quat[0]);
    if (material) mesh.renderOrder = 1; // drawn after the opaque target it overlaps
    bodies[geom.body].add(mesh);
  }
  return { group, bodies };
}

function makeRobot(avatar) {
  const { group, bodies } = buildG1(null);
  everyone.add(group);
  const label = document.createElement('div');
  label.className = 'label';
  $('stage').appendChild(label);
  const robot = { avatar, group, bodies, label, posture: null };
  robots.set(avatar, robot);
  placeSideBySide();
  return robot;
}

function placeSideBySide() {
  const order = [...robots.keys()].sort((a, b) => a - b);
  order.forEach((avatar, slot) => { robots.get(avatar).group.position.set(0, (slot - (order.length - 1) / 2) * SPACING_M, 0); });
  state.bodies = robots.get(order[0]).bodies;
  state.performers = order.length;
}

function setBodies(bodies, a, o, nbody) {
  for (let b = 0; b < nbody; b++) {
    const k = o + 7 * b;
    bodies[b].position.set(a[k], a[k + 1], a[k + 2]);
    bodies[b].quaternion.set(a[k + 4], a[k + 5], a[k + 6], a[k + 3]);
  }
}

// The physics robot (its LowState, where the viewer reads it): one translucent G1 drawn over the
// target of the performer it is compared with (or beside it), and its tracking error.
const GROUPS = ['legs', 'waist', 'arms'];
let ghost = null; // { group, bodies, avatar }
function measuredRobot() {
  if (!ghost) {
    const material = new THREE.MeshStandardMaterial({ color: 0xff9a3c, emissive: 0x4a2000, roughness: 0.5, metalness: 0.0,
      transparent: true, opacity: 0.5, depthWrite: false });
    ghost = { ...buildG1(material), avatar: -1 };
    scene.add(ghost.group);
    $('measured-section').hidden = false;
  }
  return ghost;
}

function placeGhost() {
  if (!ghost) return;
  const target = robots.get(ghost.avatar);
  ghost.group.position.copy(target ? target.group.position : new THREE.Vector3());
  if ($('beside').checked) ghost.group.position.y += BESIDE_M;
}

// One update: [performers, then per performer: avatar_index, posture_index (-1: none), bodies x y z qw qx qy qz],
// then, where the viewer reads LowState: [1, avatar_index compared with (-1: none), LowState age ms,
// tracking error mean legs waist arms, max legs waist arms (rad; NaN: no target), bodies].
function applyPose(buf) {
  const a = new Float32Array(buf);
  const nbody = template.desc.bodies.length;
  let o = 1;
  for (let p = 0; p < a[0] && o + 2 + 7 * nbody <= a.length; p++, o += 2 + 7 * nbody) {
    const robot = robots.get(a[o]) || makeRobot(a[o]);
    robot.posture = a[o + 1] >= 0 ? Math.round(a[o + 1]) : null;
    setBodies(robot.bodies, a, o + 2, nbody);
  }
  if (a[o] === 1 && o + 9 + 7 * nbody <= a.length) {
    const g = measuredRobot();
    g.avatar = a[o + 1];
    setBodies(g.bodies, a, o + 9, nbody);
    placeGhost();
    const m = state.measured;
    m.updates++;
    m.avatar = g.avatar;
    m.age_ms = a[o + 2];
    GROUPS.forEach((name, i) => {
      m.mean[name] = Number.isNaN(a[o + 3 + i]) ? null : a[o + 3 + i];
      m.max[name] = Number.isNaN(a[o + 6 + i]) ? null : a[o + 6 + i];
    });
    showTracking();
  }
  state.posture = robots.size ? robots.get(Math.min(...robots.keys())).posture : null;
  state.poses++;
}

const rad = (v) => (v === null || v === undefined ? '–' : v.toFixed(3));
let trackingShownAt = 0;
function showTracking() {
  const now = performance.now();
  if (now - trackingShownAt < 200) return; // the table at 5 Hz, whatever the pose rate
  trackingShownAt = now;
  const m = state.measured, b = (state.ledger && state.ledger.robot) || {};
  const bridge = b.tracking_error_rad || {};
  $('tracking').tBodies[0].innerHTML = GROUPS.map((name) => {
    const cls = m.mean[name] !== null && m.mean[name] > 0.15 ? 'bad' : '';
    const br = bridge[name] || {};
    return `<tr><td>${name}</td><td class="${cls}">${rad(m.mean[name])}</td><td>${rad(m.max[name])}</td>` +
      `<td>${rad(br.p50)}</td><td>${rad(br.p99)}</td></tr>`;
  }).join('');
  const stale = m.age_ms > 500;
  $('measured-note').textContent = (stale ? `LowState ${(m.age_ms / 1000).toFixed(1)} s old` : `LowState ${m.age_ms.toFixed(0)} ms old`) +
    (b.robot_state ? ` · bridge ${b.robot_state}` : '') + (m.avatar < 0 ? ' · no target yet' : '');
  $('measured-note').className = stale ? 'bad' : 'muted';
  $('hud-measured').textContent = m.mean.arms === null ? 'physics robot' : `arms error ${rad(m.mean.arms)} rad`;
}

// The camera follows the performers' middle and stays far enough back to keep every robot in view:
// what the person turned or zoomed out stays.
const pelvis = new THREE.Vector3(), middle = new THREE.Vector3();
function follow() {
  if (!state.ready || !state.poses || !robots.size) return;
  const at = [...robots.values(), ...(ghost ? [ghost] : [])].map((r) => r.bodies[state.pelvis].getWorldPosition(pelvis).clone());
  middle.set(0, 0, 0);
  for (const p of at) middle.add(p);
  middle.divideScalar(at.length);
  const reach = Math.max(...at.map((p) => Math.hypot(p.x - middle.x, p.y - middle.y))) + 0.95; // + arms, head, feet
  const half = THREE.MathUtils.degToRad(camera.fov / 2);
  const narrowest = Math.min(half, Math.atan(Math.tan(half) * camera.aspect));
  controls.minDistance = reach / Math.sin(narrowest) * 1.05;
  const goal = new THREE.Vector3(middle.x, middle.y, 0.72);
  const step = goal.sub(controls.target).multiplyScalar(0.12);
  controls.target.add(step);
  camera.position.add(step);
}

const head = new THREE.Vector3();
function placeLabels() {
  const w = canvas.clientWidth, h = canvas.clientHeight;
  for (const r of robots.values()) {
    const name = state.names[r.avatar] || (robots.size > 1 ? `performer ${r.avatar}` : '');
    r.label.textContent = name;
    r.label.hidden = !name;
    r.bodies[state.pelvis].getWorldPosition(head);
    head.z += 0.75;
    head.project(camera);
    r.label.style.left = `${(head.x + 1) / 2 * w}px`;
    r.label.style.top = `${(1 - head.y) / 2 * h}px`;
  }
}

let rateFrames = 0, rateT0 = performance.now();
function draw(now) {
  resize();
  follow();
  controls.update();
  renderer.render(scene, camera);
  placeLabels();
  state.frames++;
  rateFrames++;
  if (now - rateT0 > 1000) {
    $('hud-rate').textContent = `${Math.round(rateFrames * 1000 / (now - rateT0))} fps`;
    rateFrames = 0; rateT0 = now;
  }
  requestAnimationFrame(draw);
}

// Where a robot is on the canvas, in normalised device coordinates (tests check it is inside).
function screenBox(object) {
  const box = new THREE.Box3().setFromObject(object);
  if (box.isEmpty()) return null;
  let lo = [Infinity, Infinity], hi = [-Infinity, -Infinity];
  for (const x of [box.min.x, box.max.x]) for (const y of [box.min.y, box.max.y]) for (const z of [box.min.z, box.max.z]) {
    const p = new THREE.Vector3(x, y, z).project(camera);
    lo = [Math.min(lo[0], p.x), Math.min(lo[1], p.y)]; hi = [Math.max(hi[0], p.x), Math.max(hi[1], p.y)];
  }
  return { min: lo, max: hi, height_m: box.max.z - box.min.z };
}
state.robotBox = () => screenBox(everyone);
state.measuredBox = () => (ghost ? screenBox(ghost.group) : null);
state.robotBoxes = () => [...robots.entries()].sort((a, b) => a[0] - b[0]).map(([avatar, r]) =>
  ({ avatar, name: r.label.textContent, posture: r.posture, ...screenBox(r.group) }));

function connect() {
  const ws = new WebSocket(`ws://${location.host}/ws`);
  ws.binaryType = 'arraybuffer';
  ws.onmessage = (ev) => {
    if (!state.ready) return;
    applyPose(ev.data);
    const others = robots.size > 1 ? ` · ${robots.size} performers` : '';
    $('hud-index').textContent = (state.posture === null ? 'no frame yet' : `posture_index ${state.posture}`) + others;
  };
  ws.onclose = () => setTimeout(connect, 1000);
}

// ---- ledger --------------------------------------------------------------------------------
const fmt = (v) => (v === null || v === undefined ? '–' : typeof v === 'number' ? v.toLocaleString('en-US') : String(v));
function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c])); }
function kv(id, rows, bad = () => false) {
  $(id).innerHTML = rows.map(([k, v]) => `<tr><td>${esc(k)}</td><td class="${bad(k, v) ? 'bad' : ''}">${esc(fmt(v))}</td></tr>`).join('');
}

function drawLatency(lat) {
  const c = $('latency'), g = c.getContext('2d');
  const w = c.width, h = c.height;
  g.clearRect(0, 0, w, h);
  const values = [...lat.p50_ms, ...lat.p99_ms].filter((v) => v !== null);
  const top = Math.max(5, ...values) * 1.15;
  g.strokeStyle = '#262b33'; g.fillStyle = '#8d96a0'; g.font = '10px system-ui'; g.lineWidth = 1;
  for (const f of [0.25, 0.5, 0.75]) {
    const y = h - f * h; g.beginPath(); g.moveTo(0, y); g.lineTo(w, y); g.stroke();
    g.fillText(`${(top * f).toFixed(1)} ms`, 4, y - 2);
  }
  const n = 60;
  const line = (series, color) => {
    g.strokeStyle = color; g.lineWidth = 1.6; g.beginPath();
    let pen = false;
    series.forEach((v, i) => {
      const x = w - (series.length - 1 - i) * (w / (n - 1)), y = h - (v ?? 0) / top * h;
      if (v === null) { pen = false; return; }
      if (pen) g.lineTo(x, y); else g.moveTo(x, y);
      pen = true;
    });
    g.stroke();
  };
  line(lat.p99_ms, '#f0883e');
  line(lat.p50_ms, '#6cb6ff');
  const last = (s) => { for (let i = s.length - 1; i >= 0; i--) if (s[i] !== null) return `${s[i].toFixed(1)} ms`; return '–'; };
  $('p50').textContent = last(lat.p50_ms);
  $('p99').textContent = last(lat.p99_ms);
}

function drawPerformers(rows) {
  for (const r of rows) if (r.name) state.names[r.performer] = r.name;
  $('performers-section').hidden = rows.length < 2;
  $('performers').tBodies[0].innerHTML = rows.map((r) => {
    const cls = r.conserved ? 'ok' : (r.state || '').startsWith('not') ? 'bad' : '';
    return `<tr><td title="avatar_index ${r.performer}">${esc(r.name || 'performer')} <span class="muted">#${r.performer}</span></td><td class="${cls}" title="${esc(r.state || '')}">${esc(r.state || '–')}</td>` +
      `<td>${fmt(r.unique)}</td><td class="${r.missing > 0 ? 'bad' : ''}">${fmt(r.missing)}</td><td>${fmt(r.applied)}</td></tr>`;
  }).join('');
}

async function refreshLedger() {
  try {
    const d = await (await fetch('/ledger.json', { cache: 'no-store' })).json();
    const workers = (d.workers || []).map((w) =>
      `<tr class="worker"><td>&nbsp;&nbsp;${esc(w.worker)}</td><td colspan="4" class="muted">performers ${esc(w.performers.join(',') || '-')}, ${fmt(w.frames)} frames${w.takeovers ? `, ${fmt(w.takeovers)} taken over` : ''}</td></tr>`).join('');
    $('stages').tBodies[0].innerHTML = d.stages.map((r) =>
      `<tr><td>${r.stage}</td><td>${fmt(r.in)}</td><td>${fmt(r.out)}</td><td>${fmt(r.pending)}</td><td class="${r.rejected > 0 ? 'bad' : ''}">${fmt(r.rejected)}</td></tr>` +
      (r.stage === 'retarget' ? workers : '')).join('');
    const v = d.verdict;
    const badge = $('verdict');
    if (v) {
      badge.textContent = v.state;
      badge.title = v.state;
      badge.className = 'badge ' + (v.unique_frames_conserved ? 'ok' : v.state.startsWith('not') ? 'bad' : 'wait');
      kv('source', d.source, (k, x) => (k.startsWith('missing') || k.startsWith('rejected')) && x > 0);
      const mp = v.missing_by_path || {};
      const label = { main_only: 'main only (recoverable by merging)', both: 'both paths (upstream)', side_only: 'side only', main_no_side_data: 'main, no side data' };
      const count = (r) => (r || []).reduce((n, [lo, hi]) => n + hi - lo + 1, 0);
      kv('paths', Object.keys(label).map((k) => [label[k], v.missing_by_path ? count(mp[k]) : '–']), (k, x) => x > 0);
      $('segments').tBodies[0].innerHTML = (v.per_segment || []).slice().reverse().map((s) =>
        `<tr><td>${s.segment}</td><td>${fmt(s.first_index)}</td><td>${fmt(s.last_index)}</td><td>${fmt(s.unique_frames)}</td><td class="${s.missing_indices ? 'bad' : ''}">${fmt(s.missing_indices)}</td></tr>`).join('');
    } else {
      badge.textContent = 'viewer only (no pipeline on NATS)';
      badge.className = 'badge wait';
    }
    $('robot-section').hidden = !d.robot;
    if (d.robot) kv('robot', d.robot.figures, (k, x) => (k === 'deadline misses' || k.startsWith('stalls')) && !String(x).startsWith('0'));
    drawPerformers(d.performers || []);
    kv('viewer', Object.entries(d.viewer), (k, x) => (k === 'crc_invalid' || k === 'frame_id_gaps') && x > 0);
    $('durable-section').hidden = !d.durable.length;
    kv('durable', d.durable);
    drawLatency(d.latency);
    state.ledger = d;
  } catch (e) {
    state.errors.push(String(e));
  }
  setTimeout(refreshLedger, 1000);
}

async function loadPlots() {
  try {
    const names = await (await fetch('/plots.json')).json();
    if (names.length) $('plots').innerHTML = names.map((n) => `<a href="/plots/${encodeURI(n)}" target="_blank">${esc(n)}</a>`).join('');
  } catch (e) { /* no plots */ }
}

$('beside').addEventListener('change', placeGhost);
loadRobot().then(connect).catch((e) => { state.errors.push(String(e)); $('hud-index').textContent = 'robot failed to load'; });
refreshLedger();
loadPlots();
requestAnimationFrame(draw);
