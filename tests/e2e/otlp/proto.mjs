// The OTLP side of the e2e tests: the official schema's protobuf classes, as the OpenTelemetry JS
// SDK ships them (@opentelemetry/otlp-transformer, pinned in package.json), and what the tests
// read out of a decoded request (points, attributes, the naming rule). Independent of stallwatch.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', '@opentelemetry', 'otlp-transformer'))) {
  // One clear line, and a failure: a missing decoder must never look like a pass.
  process.stderr.write(
    'e2e/otlp: tests/e2e/otlp/node_modules is missing: run `bash scripts/install-deps.sh`\n',
  );
  process.exit(1);
}
const require = createRequire(import.meta.url);
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root.js');

export const proto = root.opentelemetry.proto;
const MetricsRequest = proto.collector.metrics.v1.ExportMetricsServiceRequest;
const MetricsResponse = proto.collector.metrics.v1.ExportMetricsServiceResponse;
const LogsRequest = proto.collector.logs.v1.ExportLogsServiceRequest;
const LogsResponse = proto.collector.logs.v1.ExportLogsServiceResponse;

// Plain objects: 64-bit integers as decimal strings (exact), enums by name, absent = default.
const TO_OBJECT = { longs: String, enums: String, bytes: String, defaults: false, arrays: true };

export const CUMULATIVE = 'AGGREGATION_TEMPORALITY_CUMULATIVE';
export const DELTA = 'AGGREGATION_TEMPORALITY_DELTA';
export const SEVERITY = proto.logs.v1.SeverityNumber; // name -> number and number -> name

export function decodeMetrics(buf) {
  return MetricsRequest.toObject(MetricsRequest.decode(buf), TO_OBJECT);
}
export function decodeLogs(buf) {
  return LogsRequest.toObject(LogsRequest.decode(buf), TO_OBJECT);
}
export function encodeMetrics(obj) {
  return Buffer.from(MetricsRequest.encode(MetricsRequest.fromObject(obj)).finish());
}
export function encodeLogs(obj) {
  return Buffer.from(LogsRequest.encode(LogsRequest.fromObject(obj)).finish());
}

// Naming rule and points

// [suffix, UCUM unit, whether the suffix leaves the name]. `_ratio` stays in the name: the
// issue's own example is stallwatch_offcpu_ratio <-> stallwatch.offcpu.ratio (unit "1"), and
// dropping it would collide with stallwatch_offcpu_seconds_total <-> stallwatch.offcpu.
const UNIT_SUFFIXES = [
  ['_seconds', 's', true],
  ['_bytes', 'By', true],
  ['_ratio', '1', false],
];

// Prometheus family name (+ type) -> { name, unit } under the rule of the issue: drop `_total`
// of counters, drop a unit suffix (its UCUM unit goes to `unit`), `_` -> `.`. unit is null when
// the rule says nothing (any unit, e.g. `{chain}`, is then acceptable).
export function otlpName(promName, type) {
  let n = promName;
  if (type === 'counter' && n.endsWith('_total')) n = n.slice(0, -'_total'.length);
  let unit = null;
  for (const [suffix, u, drop] of UNIT_SUFFIXES) {
    if (n.endsWith(suffix)) {
      if (drop) n = n.slice(0, -suffix.length);
      unit = u;
      break;
    }
  }
  return { name: n.replaceAll('_', '.'), unit };
}

// Attribute list -> plain object of JS values (strings, numbers, booleans).
export function attrs(list = []) {
  const out = {};
  for (const { key, value = {} } of list) out[key] = anyValue(value);
  return out;
}
export function anyValue(v = {}) {
  if ('stringValue' in v) return v.stringValue;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return v.doubleValue;
  if ('boolValue' in v) return v.boolValue;
  if ('arrayValue' in v) return (v.arrayValue.values || []).map(anyValue);
  if ('kvlistValue' in v) return attrs(v.kvlistValue.values);
  if ('bytesValue' in v) return v.bytesValue;
  return '';
}

// Flattens one decoded ExportMetricsServiceRequest into points:
// { resource, metric: {name, unit, kind, temporality, monotonic}, point, attrs, key }
// where key identifies the series (metric + resource + point attributes).
export function metricPoints(decoded) {
  const out = [];
  for (const rm of decoded.resourceMetrics || []) {
    const resource = attrs(rm.resource?.attributes);
    for (const sm of rm.scopeMetrics || []) {
      for (const m of sm.metrics || []) {
        const kind = ['gauge', 'sum', 'histogram', 'exponentialHistogram', 'summary'].find(
          (k) => m[k] !== undefined,
        );
        const data = m[kind] || {};
        const metric = {
          name: m.name,
          unit: m.unit ?? '',
          kind,
          temporality: data.aggregationTemporality ?? 'AGGREGATION_TEMPORALITY_UNSPECIFIED',
          monotonic: Boolean(data.isMonotonic),
        };
        for (const point of data.dataPoints || []) {
          const a = attrs(point.attributes);
          out.push({ resource, metric, point, attrs: a, key: seriesKey(m.name, resource, a) });
        }
      }
    }
  }
  return out;
}

export function seriesKey(name, resource, pointAttrs) {
  const sorted = (o) =>
    JSON.stringify(
      Object.keys(o)
        .sort()
        .map((k) => [k, o[k]]),
    );
  return `${name}|${sorted(resource)}|${sorted(pointAttrs)}`;
}

// A number data point's value (asDouble / asInt, absent = 0).
export function numberValue(p) {
  if (p.asDouble !== undefined) return p.asDouble;
  if (p.asInt !== undefined) return Number(p.asInt);
  return 0;
}
