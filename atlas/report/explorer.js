// The attention explorer of an Attention Atlas report: a head view (tokens in two columns, a line from each
// attending token on the left to each token it attends to on the right, its opacity the weight, as bertviz's
// head view) and a layer x head grid of thumbnails, for each run of the report, from the data embedded in the
// page (see atlas/report/explorer.py: per input, round(255 w) bytes [layer][head][src][dst], deflated, base64).
"use strict";

(() => {
  const source = document.getElementById("atlas-explorer-data");
  if (!source) {
    document.body.dataset.explorer = "none";
    return;
  }
  const runs = JSON.parse(source.textContent).runs;
  const first = runs[0];
  const status = document.getElementById("ex-status");
  const pick = {
    example: document.getElementById("ex-example"),
    layer: document.getElementById("ex-layer"),
    head: document.getElementById("ex-head"),
  };
  const state = { example: first.examples[0].id, layer: 0, head: 0 };
  const holder = document.createElement("div");
  holder.innerHTML = "<svg></svg>";
  const SVG = holder.firstChild.namespaceURI; // the SVG namespace, as the HTML parser gives it
  const ROW = 18;
  const COLUMN = 130;
  const GAP = 170;
  const THUMB_COLOUR = [31, 80, 160];

  function svg(name, attributes, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(name, attributes, parent, text) {
    const node = document.createElement(name);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function headColour(head, heads) {
    return `hsl(${Math.round((360 * head) / heads)}, 70%, 42%)`;
  }

  async function inflate(base64) {
    const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  function weights(run, example, layer, head) {
    const n = example.tokens.length;
    const start = (layer * run.heads + head) * n * n;
    return example.levels.subarray(start, start + n * n);
  }

  function option(select, value, label) {
    html("option", { value: String(value) }, select, label);
  }

  function fillControls() {
    for (const example of first.examples) {
      const text = example.text.length > 70 ? `${example.text.slice(0, 67)}...` : example.text;
      option(pick.example, example.id, `#${example.id}: ${text}`);
    }
    const layers = Math.max(...runs.map((r) => r.layers));
    const heads = Math.max(...runs.map((r) => r.heads));
    for (let l = 0; l < layers; l++) option(pick.layer, l, String(l + 1));
    for (let h = 0; h < heads; h++) option(pick.head, h, String(h + 1));
    pick.example.addEventListener("change", () => choose({ example: Number(pick.example.value) }));
    pick.layer.addEventListener("change", () => choose({ layer: Number(pick.layer.value) }));
    pick.head.addEventListener("change", () => choose({ head: Number(pick.head.value) }));
  }

  function choose(change) {
    Object.assign(state, change);
    pick.example.value = String(state.example);
    pick.layer.value = String(state.layer);
    pick.head.value = String(state.head);
    render();
  }

  function makePanels() {
    const panels = document.getElementById("ex-panels");
    panels.className = `panels n${runs.length}`;
    return runs.map((run) => {
      const panel = html("div", { class: "panel" }, panels);
      const kept = run.kept_mass === null ? "dense: every weight" : `sparse: kept mass ${run.kept_mass}`;
      html("p", { class: "source" }, panel, `${run.run} (model ${run.model}, corpus ${run.corpus}; ${kept})`);
      return { run, note: html("p", { class: "note" }, panel), view: html("div", { class: "view" }, panel),
        grid: html("div", { class: "thumbs" }, panel) };
    });
  }

  function drawHeadView(panel, example) {
    const { run } = panel;
    const n = example.tokens.length;
    const w = weights(run, example, state.layer, state.head);
    const right = COLUMN + GAP;
    const y = (i) => 14 + i * ROW;
    const root = svg("svg", {
      class: "head-view", width: 2 * COLUMN + GAP, height: n * ROW + 14,
      "data-example": example.id, "data-layer": state.layer + 1, "data-head": state.head + 1,
    });
    const group = svg("g", { stroke: headColour(state.head, run.heads), "stroke-width": 2 }, root);
    const lines = [];
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        const level = w[i * n + j];
        if (level === 0) continue;
        const line = svg("line", { x1: COLUMN, y1: y(i) - 4, x2: right, y2: y(j) - 4,
          "stroke-opacity": (level / 255).toFixed(3), "data-src": i, "data-dst": j }, group);
        lines.push({ line, i, j });
      }
    }
    const shades = { src: [], dst: [] };
    const labels = { src: [], dst: [] };
    example.tokens.forEach((token, k) => {
      for (const side of ["src", "dst"]) {
        const x = side === "src" ? 0 : right + 4;
        const shade = svg("rect", { x, y: y(k) - ROW + 5, width: COLUMN - 8, height: ROW - 2, class: "shade",
          fill: headColour(state.head, run.heads), "fill-opacity": 0 }, root);
        const label = svg("text", { x: side === "src" ? COLUMN - 8 : right + 8, y: y(k),
          "text-anchor": side === "src" ? "end" : "start", class: `token ${side}`, "data-index": k }, root);
        label.textContent = token;
        for (const node of [shade, label]) {
          node.addEventListener("mouseenter", () => highlight(side, k));
          node.addEventListener("mouseleave", () => highlight(null, k));
        }
        shades[side].push(shade);
        labels[side].push(label);
      }
    });

    function highlight(side, k) {
      // side 'src': token k's row (whom it attends to); 'dst': its column (who attends to it); null: all lines
      for (const { line, i, j } of lines) {
        line.style.visibility = side === null || (side === "src" ? i === k : j === k) ? "visible" : "hidden";
      }
      for (let m = 0; m < n; m++) {
        const level = side === "src" ? w[k * n + m] : side === "dst" ? w[m * n + k] : 0;
        shades.dst[m].setAttribute("fill-opacity", side === "src" ? ((0.8 * level) / 255).toFixed(3) : 0);
        shades.src[m].setAttribute("fill-opacity", side === "dst" ? ((0.8 * level) / 255).toFixed(3) : 0);
        labels.src[m].classList.toggle("active", side === "src" && m === k);
        labels.dst[m].classList.toggle("active", side === "dst" && m === k);
      }
    }

    panel.view.replaceChildren(root);
    return lines.length;
  }

  function drawThumbnails(panel, example) {
    const { run } = panel;
    const n = example.tokens.length;
    const grid = html("div", { class: "grid" });
    grid.style.gridTemplateColumns = `auto repeat(${run.heads}, 1fr)`;
    html("span", {}, grid, "");
    for (let h = 0; h < run.heads; h++) html("span", { class: "axis" }, grid, String(h + 1));
    for (let l = 0; l < run.layers; l++) {
      html("span", { class: "axis" }, grid, `L${l + 1}`);
      for (let h = 0; h < run.heads; h++) {
        const canvas = html("canvas", { width: n, height: n, class: "thumb", title: `layer ${l + 1}, head ${h + 1}`,
          "data-layer": l + 1, "data-head": h + 1 }, grid);
        if (l === state.layer && h === state.head) canvas.classList.add("chosen");
        const image = new ImageData(n, n);
        const w = weights(run, example, l, h);
        for (let k = 0; k < n * n; k++) {
          image.data.set(THUMB_COLOUR, 4 * k);
          image.data[4 * k + 3] = w[k];
        }
        canvas.getContext("2d").putImageData(image, 0, 0);
        canvas.addEventListener("click", () => choose({ layer: l, head: h }));
      }
    }
    panel.grid.replaceChildren(grid);
  }

  function render() {
    const counts = [];
    const tokens = first.examples.find((e) => e.id === state.example)?.tokens.join(" ");
    for (const panel of panels) {
      const example = panel.run.examples.find((e) => e.id === state.example);
      panel.note.textContent = "";
      if (!example) {
        panel.note.textContent = `input ${state.example} is not in this run`;
        panel.view.replaceChildren();
        panel.grid.replaceChildren();
        continue;
      }
      if (state.layer >= panel.run.layers || state.head >= panel.run.heads) {
        panel.note.textContent = `this run has ${panel.run.layers} layers of ${panel.run.heads} heads`;
        panel.view.replaceChildren();
      } else {
        counts.push(drawHeadView(panel, example));
      }
      if (example.tokens.join(" ") !== tokens) panel.note.textContent = "its tokens differ from the first run's";
      drawThumbnails(panel, example);
    }
    status.textContent = `input ${state.example}, layer ${state.layer + 1}, head ${state.head + 1}: ` +
      `${counts.join(" and ")} lines`;
    document.body.dataset.explorer = "ready";
  }

  let panels = [];
  (async () => {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser cannot inflate the embedded maps (it lacks DecompressionStream)");
    }
    for (const run of runs) {
      for (const example of run.examples) example.levels = await inflate(example.data);
    }
    fillControls();
    panels = makePanels();
    choose({});
  })().catch((error) => {
    status.textContent = `the explorer failed: ${error.message}`;
    document.body.dataset.explorer = "failed";
    throw error;
  });
})();
