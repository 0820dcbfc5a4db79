// The pure parts of pulling images from registries: references normalized as Docker does, the
// insecure-registry match, skopeo's failures mapped to 404 / 403 / 503 codes with the registry's
// own words; and the build body's fromImageRegistry.
import { describe, expect, it } from 'vitest';
import { isInsecure, parseImageRef, skopeoError } from '../../src/templates/layers/pull.js';
import { parseBuild } from '../../src/templates/build/steps.js';
import { defaultTemplateName } from '../../src/cli/commands/template.js';

describe('parseImageRef', () => {
  it('normalizes Docker Hub short names and keeps registry hosts, tags and digests', () => {
    expect(parseImageRef('python:3.12-slim')).toMatchObject({
      registry: 'docker.io',
      repository: 'library/python',
      tag: '3.12-slim',
      canonical: 'docker.io/library/python:3.12-slim',
    });
    expect(parseImageRef('e2bdev/base')).toMatchObject({ registry: 'docker.io', repository: 'e2bdev/base', tag: 'latest' });
    expect(parseImageRef('docker://127.0.0.1:5000/team/app:v1')).toMatchObject({
      registry: '127.0.0.1:5000',
      repository: 'team/app',
      tag: 'v1',
      canonical: '127.0.0.1:5000/team/app:v1',
    });
    expect(parseImageRef('localhost/app')).toMatchObject({ registry: 'localhost', repository: 'app', tag: 'latest' });
    const d = `sha256:${'a'.repeat(64)}`;
    expect(parseImageRef(`ghcr.io/o/r@${d}`)).toEqual({ registry: 'ghcr.io', repository: 'o/r', digest: d, canonical: `ghcr.io/o/r@${d}` });
  });

  it('refuses what is no reference with 400', () => {
    for (const bad of ['', 'Upper/Case', 'a:b:c', 'x@sha256:short', 'docker://', 'reg.io/a//b', 'a b']) {
      expect(() => parseImageRef(bad), bad).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }) as Error);
    }
  });

  it('names a template after the image', () => {
    expect(defaultTemplateName('docker://127.0.0.1:5000/team/app:v1')).toBe('app:v1');
    expect(defaultTemplateName('docker://reg.io/app')).toBe('app:latest');
  });
});

describe('isInsecure', () => {
  it('matches host:port exactly, a bare host on any port, nothing else', () => {
    expect(isInsecure('127.0.0.1:5000', ['127.0.0.1:5000'])).toBe(true);
    expect(isInsecure('127.0.0.1:5001', ['127.0.0.1:5000'])).toBe(false);
    expect(isInsecure('localhost:5000', ['127.0.0.1:5000'])).toBe(false);
    expect(isInsecure('reg.lan:5000', ['reg.lan'])).toBe(true);
    expect(isInsecure('docker.io', [])).toBe(false);
  });
});

describe('skopeoError', () => {
  const fatal = (msg: string) => `time="2026-01-01T00:00:00Z" level=fatal msg="${msg.replace(/"/g, '\\"')}"\n`;
  it('maps unknown images, refused credentials and unreachable registries to their codes, keeping the registry words', () => {
    const nf = skopeoError(
      fatal('Error parsing image name "docker://r:1/a:b": reading manifest b in r:1/a: manifest unknown: manifest unknown'),
      'r:1/a:b',
      'r:1',
    );
    expect(nf).toMatchObject({ kind: 'IMAGE_NOT_FOUND', http: 404 });
    expect(nf.message).toBe('image r:1/a:b not found in registry r:1: reading manifest b in r:1/a: manifest unknown: manifest unknown');
    expect(skopeoError(fatal('reading manifest v1 in r:1/a: unauthorized: authentication required'), 'r:1/a:v1', 'r:1')).toMatchObject({
      kind: 'REGISTRY_AUTH',
      http: 403,
    });
    const down = skopeoError(fatal('pinging container registry r:1: Get "https://r:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused'), 'r:1/a', 'r:1');
    expect(down).toMatchObject({ kind: 'REGISTRY_UNREACHABLE', http: 503, retryAfter: 30 });
    expect(down.message).toMatch(/try again later/);
    expect(
      skopeoError(fatal('pinging container registry r:1: Get "https://r:1/v2/": http: server gave HTTP response to HTTPS client'), 'r:1/a', 'r:1').message,
    ).toMatch(/\[registry\] insecure/);
    expect(skopeoError('', 'r:1/a', 'r:1')).toMatchObject({ kind: 'REGISTRY_UNREACHABLE' });
    expect(skopeoError(fatal('writing blob: write /var/lib/cubed/layers/tmp/pull-1/x: no space left on device'), 'a', 'r')).toMatchObject({
      kind: 'STORE_FULL',
      http: 503,
    });
    // A port that looks like a status is no status.
    expect(
      skopeoError(
        fatal('pinging container registry localhost:40339: Get "https://localhost:40339/v2/": dial tcp: connect: connection refused'),
        'a',
        'localhost:40339',
      ),
    ).toMatchObject({ kind: 'REGISTRY_UNREACHABLE' });
    expect(skopeoError(fatal('reading manifest v1: received unexpected HTTP status: 403 Forbidden'), 'a', 'r')).toMatchObject({ kind: 'REGISTRY_AUTH' });
  });
});

describe('fromImageRegistry in the build body', () => {
  it('takes username and password, refuses AWS and GCP registries and half credentials', () => {
    expect(parseBuild({ fromImage: 'r:1/a', fromImageRegistry: { type: 'registry', username: 'u', password: 'p' } }).from).toEqual({
      image: 'r:1/a',
      creds: { username: 'u', password: 'p' },
    });
    expect(() => parseBuild({ fromImage: 'a', fromImageRegistry: { type: 'aws', awsAccessKeyId: 'x' } })).toThrow(/fromAWSRegistry, fromGCPRegistry/);
    expect(() => parseBuild({ fromImage: 'a', fromImageRegistry: { type: 'registry', username: 'u' } })).toThrow(/username and password are required/);
    expect(() => parseBuild({ fromTemplate: 'a', fromImageRegistry: { type: 'registry', username: 'u', password: 'p' } })).toThrow(/goes with fromImage/);
  });
});
