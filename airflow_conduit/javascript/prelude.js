// What Conduit's custom.javascript gives a script (pkg/plugin/processor/builtin/impl/custom/javascript.go):
// `logger`, `Record()`, `RawData()`, `StructuredData()`, and the record as
// {Position, Operation, Metadata, Key, Payload: {Before, After}}. Plus the batch runner the engine calls:
// one call per Arrow batch, columns in and out as JSON text (a call into V8 costs ~0.2 ms).
(function () {
  "use strict";
  const g = globalThis;

  // Raw data is a byte array (Conduit exposes opencdc.RawData, a []byte: indexable, `length`), so
  // `String.fromCharCode.apply(String, rec.Payload.After)` reads it as Conduit's docs do.
  class ConduitRawData extends Uint8Array {}
  function latin1Bytes(text, type) {
    const bytes = new type(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return bytes;
  }
  function latin1Text(bytes) {
    let text = "";
    for (let i = 0; i < bytes.length; i += 8192) {
      text += String.fromCharCode.apply(String, bytes.subarray(i, i + 8192));
    }
    return text;
  }
  // Go's []byte(string): UTF-8, a lone surrogate becoming U+FFFD.
  const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
  function utf8(text) {
    return unescape(encodeURIComponent(String(text).replace(LONE_SURROGATE, "\uFFFD")));
  }

  // RawData("text"): the text's UTF-8 bytes (Go: opencdc.RawData(arg.String())); with or without `new`.
  function RawData(text) {
    return latin1Bytes(arguments.length > 0 ? utf8(text) : "", ConduitRawData);
  }
  RawData.prototype = ConduitRawData.prototype;

  // StructuredData(): an empty map (Conduit ignores arguments too).
  function StructuredData() {
    return {};
  }

  // A record reads its fields from the batch's columns when the script first touches them, and only
  // the fields touched are written back (`changed`, a bit per field): a script that changes
  // .Payload.After costs no conversion of the key, position or metadata.
  const POSITION = 1, OPERATION = 2, METADATA = 4, KEY = 8, BEFORE = 16, AFTER = 32, ALL = 63;
  const LOAD = {
    [POSITION]: (c, i) => (c.position[i] === null ? null : latin1Bytes(c.position[i], Uint8Array)),
    // fromEntries defines each key (a "__proto__" key stays a key; Object.assign would set the prototype).
    [METADATA]: (c, i) => Object.fromEntries(Object.entries(c.metadata[i] || {})),
    [KEY]: (c, i) => dataIn(c.key_json[i], c.key_raw[i]),
    [BEFORE]: (c, i) => dataIn(c.before_json[i], c.before_raw[i]),
    [AFTER]: (c, i) => dataIn(c.after_json[i], c.after_raw[i]),
  };
  const EXPORT = Symbol("export"), GET = Symbol("get"), SET = Symbol("set");
  class ConduitRecord {
    #columns; #index; #operation; #loaded; #values = {}; #payload = null;
    constructor(columns, index) {
      this.#columns = columns;
      this.#index = index;
      this.#operation = columns === null ? "" : columns.operation[index];
      this.#loaded = columns === null ? ALL : 0;
      if (columns === null) {
        Object.assign(this.#values, { [POSITION]: null, [METADATA]: {}, [KEY]: null, [BEFORE]: null, [AFTER]: null });
      }
    }
    [GET](field) {
      if (!(this.#loaded & field)) {
        this.#values[field] = LOAD[field](this.#columns, this.#index);
        this.#loaded |= field;
      }
      return this.#values[field];
    }
    [SET](field, value) {
      this.#values[field] = value;
      this.#loaded |= field;
    }
    get Position() { return this[GET](POSITION); }
    set Position(value) { this[SET](POSITION, value); }
    get Operation() { return this.#operation; }
    set Operation(value) { this.#operation = value; this.#loaded |= OPERATION; }
    get Metadata() { return this[GET](METADATA); }
    set Metadata(value) { this[SET](METADATA, value); }
    get Key() { return this[GET](KEY); }
    set Key(value) { this[SET](KEY, value); }
    get Payload() { return this.#payload || (this.#payload = new ConduitPayload(this)); }
    set Payload(value) {
      const payload = value || {};
      this[SET](BEFORE, payload.Before === undefined ? null : payload.Before);
      this[SET](AFTER, payload.After === undefined ? null : payload.After);
    }
    toJSON() {
      return { Position: this.Position, Operation: this.Operation, Metadata: this.Metadata, Key: this.Key,
        Payload: this.Payload.toJSON() };
    }
    // The record into row i of the output columns; only what the script touched.
    [EXPORT](columns, out, i) {
      if (this.#columns !== null && (this.#columns !== columns || this.#index !== i)) {
        // Another row's record (kept from an earlier call): every field of it replaces this row's.
        for (const field of [POSITION, METADATA, KEY, BEFORE, AFTER]) this[GET](field);
        this.#loaded |= OPERATION;
      }
      const touched = this.#loaded;
      if (touched & POSITION) out.position[i] = positionOut(this.#values[POSITION]);
      if (touched & OPERATION) out.operation[i] = operationOut(this.#operation);
      if (touched & METADATA) out.metadata[i] = metadataOut(this.#values[METADATA]);
      if (touched & KEY) dataOut(this.#values[KEY], out.key_json, out.key_raw, i);
      if (touched & BEFORE) dataOut(this.#values[BEFORE], out.before_json, out.before_raw, i);
      if (touched & AFTER) dataOut(this.#values[AFTER], out.after_json, out.after_raw, i);
      out.changed[i] = touched;
    }
  }
  class ConduitPayload {
    #record;
    constructor(record) { this.#record = record; }
    get Before() { return this.#record[GET](BEFORE); }
    set Before(value) { this.#record[SET](BEFORE, value); }
    get After() { return this.#record[GET](AFTER); }
    set After(value) { this.#record[SET](AFTER, value); }
    toJSON() { return { Before: this.Before, After: this.After }; }
  }
  // The fields enumerate as a Go struct's do (for...in, Object.keys of the prototype), the helpers not.
  for (const [type, names] of [[ConduitRecord, ["Position", "Operation", "Metadata", "Key", "Payload"]],
    [ConduitPayload, ["Before", "After"]]]) {
    for (const name of names) {
      Object.defineProperty(type.prototype, name, { ...Object.getOwnPropertyDescriptor(type.prototype, name), enumerable: true });
    }
  }
  // Record(): a new record, its metadata an empty map ("so that it's easier to write processor code").
  function Record() {
    return new ConduitRecord(null, 0);
  }
  Record.prototype = ConduitRecord.prototype;

  // logger: Conduit's zerolog logger (`logger.Info().Str("k", v).Msg("text")`). Any event method
  // taking (key, value) adds a field; Msg, Msgf and Send write the line. Lines are collected and
  // handed to Python's logging after each batch.
  const logs = [];
  const LEVELS = { Trace: "trace", Debug: "debug", Info: "info", Warn: "warn", Error: "error", Err: "error",
    Fatal: "fatal", Panic: "panic", WithLevel: "info", Log: "info" };
  function format(template, args) {
    let n = 0;
    return String(template).replace(/%[-+# 0-9.]*[a-zA-Z%]/g, (verb) =>
      verb === "%%" ? "%" : n < args.length ? String(args[n++]) : verb);
  }
  function event(level, fields) {
    const emit = (message) => {
      logs.push([level, message, fields]);
      return undefined;
    };
    const proxy = new Proxy({}, {
      get(_target, name) {
        if (name === "Msg") return (message) => emit(String(message));
        if (name === "Msgf") return (template, ...args) => emit(format(template, args));
        if (name === "Send") return () => emit("");
        if (name === "Err") return (error) => { fields.error = String(error); return proxy; };
        return (key, value) => {
          if (typeof key === "string" && value !== undefined) fields[key] = value;
          return proxy;
        };
      },
    });
    return proxy;
  }
  const logger = new Proxy({}, {
    get(_target, name) {
      if (name === "Print") return (...args) => { logs.push(["debug", args.map(String).join(" "), {}]); };
      if (name === "Printf") return (template, ...args) => { logs.push(["debug", format(template, args), {}]); };
      const level = LEVELS[name] || "info";
      if (name === "Err") return (_ctx, error) => event(level, error === undefined ? {} : { error: String(error) });
      return () => event(level, {});
    },
  });

  // A data field crosses as (JSON text, raw bytes as a string of one char per byte); both null: nil.
  function dataIn(text, raw) {
    if (text !== null) return JSON.parse(text);
    if (raw !== null) return latin1Bytes(raw, ConduitRawData);
    return null;
  }
  // What Conduit keeps of a data field the script set: raw data or a map; anything else is nil.
  function dataOut(value, texts, raws, i) {
    let text = null;
    let raw = null;
    if (value instanceof Uint8Array) {
      raw = latin1Text(value);
    } else if (value !== null && typeof value === "object" && !Array.isArray(value) && !ArrayBuffer.isView(value)) {
      text = JSON.stringify(value);
    }
    texts[i] = text;
    raws[i] = raw;
  }
  function positionOut(value) {
    if (value === null || value === undefined) return null;
    if (typeof value === "string") return utf8(value);
    if (ArrayBuffer.isView(value) || Array.isArray(value)) return latin1Text(Uint8Array.from(value));
    return utf8(value);
  }
  const OPERATIONS = ["create", "update", "delete", "snapshot"];
  // opencdc.Operation.UnmarshalText: a name, "Operation(N)", or "" (left at zero).
  function operationOut(value) {
    const text = String(value === undefined || value === null ? "" : value);
    if (OPERATIONS.includes(text)) return text;
    if (text === "") return "Operation(0)";
    const number = text.replace(/^Operation\(/, "").replace(/\)$/, "");
    if (/^[+-]?[0-9]+$/.test(number)) {
      const n = parseInt(number, 10);
      return n >= 1 && n <= 4 ? OPERATIONS[n - 1] : `Operation(${n})`;
    }
    throw new Error(`could not unmarshal operation: operation "${text}": unknown operation`);
  }
  function metadataOut(value) {
    const metadata = {};
    if (value !== null && typeof value === "object") {
      for (const name of Object.keys(value)) metadata[name] = String(value[name]);
    }
    return metadata;
  }
  // The script's result for record i, into the output columns: state 0 (a record), 1 (filtered, as
  // Conduit's nil) or 2 (nacked, the message in `error`).
  function store(columns, out, i, value) {
    if (value === null || value === undefined) {
      out.state[i] = 1;
      return;
    }
    if (!(value instanceof ConduitRecord)) {
      const type = Array.isArray(value) ? "array" : typeof value;
      throw new Error(`js function expected to return a record (the one it got or Record()), but returned: ${type}`);
    }
    value[EXPORT](columns, out, i);
    out.state[i] = 0;
  }
  // A thrown error as goja prints one: "Error: message at process (script.js:2:11)".
  function errorText(error) {
    let text = String(error);
    if (error instanceof Error && typeof error.stack === "string") {
      const frame = error.stack.split("\n").find((line) => /^\s+at /.test(line));
      if (frame) text += " " + frame.trim();
    }
    return text;
  }

  let entrypoint = null;
  function setEntrypoint(fn) {
    if (typeof fn !== "function") throw new Error('failed to get entrypoint function "process"');
    entrypoint = fn;
  }
  // batch: JSON of the input columns (position, operation, metadata as objects, key_json, key_raw, before_json,
  // before_raw, after_json, after_raw; bytes as strings of one char per byte). Returns JSON of the
  // output columns (only the fields `changed` names are set), plus `state`, `error` and the log lines.
  const COLUMNS = ["state", "changed", "error", "position", "operation", "metadata", "key_json", "key_raw", "before_json",
    "before_raw", "after_json", "after_raw"];
  function runBatch(batch) {
    const c = JSON.parse(batch);
    const n = c.operation.length;
    const out = {};
    for (const name of COLUMNS) out[name] = new Array(n).fill(null);
    for (let i = 0; i < n; i++) {
      try {
        store(c, out, i, entrypoint(new ConduitRecord(c, i)));
      } catch (error) {
        out.state[i] = 2;
        out.error[i] = errorText(error);
      }
    }
    out.logs = logs.splice(0, logs.length);
    try {
      return JSON.stringify(out);
    } catch (error) {  // a log field JSON cannot hold (a BigInt, a cycle)
      out.logs = [];
      return JSON.stringify(out);
    }
  }

  Object.assign(g, { logger, Record, RawData, StructuredData });
  Object.defineProperty(g, "__conduitSetEntrypoint", { value: setEntrypoint });
  Object.defineProperty(g, "__conduitRunBatch", { value: runBatch });
})();
