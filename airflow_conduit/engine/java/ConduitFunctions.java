/*
 * The engine's own SQL functions (airflow_conduit/engine/sql_functions.py registers them), each a
 * nested class. Compiled in the driver by Spark's own Janino: Java as Janino reads it, so no generics,
 * lambdas or switch over enums.
 *
 * conduit_variant_json(VARIANT) -> STRING: the same text as Spark's to_json of a VARIANT, faster.
 * Spark 4.2's Variant.toJson escapes every string and object key through a new Jackson JsonFactory
 * (about a fifth of a file pipeline's task time, measured with JFR); this walk writes UTF-8 bytes
 * straight from the variant's bytes (its strings and keys are UTF-8 already), escapes them as Jackson's
 * default escapes do, and leaves the rarer scalars (doubles, dates, timestamps, ...) to Spark's own
 * Variant.toJson.
 *
 * conduit_variant_set(VARIANT, STRING, VARIANT) -> VARIANT: the object with one field set (added, or
 * replaced where the key is there); anything but an object counts as an empty one, and a NULL value
 * sets a JSON null. What to_variant_object(map_concat(the object as a map, map(key, value))) gives,
 * without building the map: an object and a scalar value are spliced byte by byte (Splice), the
 * rest copied field by field into a new object by Spark's VariantBuilder.
 *
 * conduit_try_parse_json(BINARY) -> VARIANT: try_parse_json of the bytes as text (json.decode), read
 * from the UTF-8 bytes themselves: no decoding into a String for Jackson, no Jackson parser per value,
 * and written by Variants (the bytes Spark's VariantBuilder writes, with buffers kept per thread).
 * Any document it is not sure to read as Spark does goes to Spark's own parser.
 *
 * conduit_map_json(MAP<STRING, STRING>) -> STRING and conduit_json_map(STRING) -> MAP<STRING, STRING>:
 * a map of strings as to_json writes it, and that text read back (the metadata's form on its way to
 * and from Python's workers).
 *
 * StateTally (airflow_conduit/engine/tally.py): not a named function but one instance per micro-batch,
 * a UDF that passes a row's state through and counts it into Spark accumulators, so that the batch's
 * write counts its records by state inside Spark's generated code (an observe splits that code).
 *
 * Frames (airflow_conduit/engine/frames.py): a DataFrame's projections built from SQL text given as one
 * string, so that a step of a micro-batch's plan is one Py4J call (PySpark passes a list to the JVM an
 * element at a time, and each column it makes is a call or more of its own).
 *
 * FileRanges (airflow_conduit/engine/connectors/file.py): the builtin:file source's byte ranges of a
 * micro-batch, read into rows (range, position, key, line) on the executors, as the Python
 * stream reader reads them (lines end at a newline, a carriage return before it is not part of the
 * line), without Spark's Python data source and its Arrow round trip.
 */
package org.airflowconduit;

import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantBuilder;
import org.apache.spark.types.variant.VariantUtil;
import org.apache.spark.unsafe.types.VariantVal;

public final class ConduitFunctions {
  private ConduitFunctions() {}

  public static final class VariantJson implements org.apache.spark.sql.api.java.UDF1 {
    static final byte[] HEX = {
      (byte) '0', (byte) '1', (byte) '2', (byte) '3', (byte) '4', (byte) '5', (byte) '6', (byte) '7',
      (byte) '8', (byte) '9', (byte) 'A', (byte) 'B', (byte) 'C', (byte) 'D', (byte) 'E', (byte) 'F'};

    /** The text as UTF-8 bytes, written from the variant's own bytes: its strings and keys are UTF-8
     * already, so none is decoded into a String and encoded again. */
    public Object call(Object value) {
      if (value == null) return null;
      VariantVal variant = (VariantVal) value;
      byte[] data = variant.getValue();
      Text out = Text.scratch();
      write(data, variant.getMetadata(), 0, out);
      return out.string();
    }

    /** The value at pos, laid out as the Variant binary format says (its header byte: the basic type
     * in the low two bits, the type's details above them). */
    static void write(byte[] value, byte[] metadata, int pos, Text out) {
      int header = value[pos] & 0xFF;
      int basic = header & 3;
      int info = header >> 2;
      if (basic == 1) {  // a short string: its length is the header's info
        quote(value, pos + 1, info, out);
      } else if (basic == 2) {
        ObjectBytes object = new ObjectBytes(value, pos);
        KeyBytes keys = new KeyBytes(metadata);
        out.put((byte) '{');
        for (int i = 0; i < object.size; i++) {
          if (i > 0) out.put((byte) ',');
          int id = object.id(i);
          quote(metadata, keys.start(id), keys.length(id), out);
          out.put((byte) ':');
          write(value, metadata, object.field(i), out);
        }
        out.put((byte) '}');
      } else if (basic == 3) {
        ArrayBytes array = new ArrayBytes(value, pos);
        out.put((byte) '[');
        for (int i = 0; i < array.size; i++) {
          if (i > 0) out.put((byte) ',');
          write(value, metadata, array.element(i), out);
        }
        out.put((byte) ']');
      } else if (info == 0) {
        out.ascii("null");
      } else if (info == 1) {
        out.ascii("true");
      } else if (info == 2) {
        out.ascii("false");
      } else if (info >= 3 && info <= 6) {  // integers of 1, 2, 4 and 8 bytes
        out.number(VariantUtil.getLong(value, pos));
      } else if (info == 8 || info == 9) {  // decimals of 4 and 8 bytes
        decimal(value, pos, info == 8 ? 4 : 8, out);
      } else if (info == 10) {  // of 16 bytes
        out.ascii(VariantUtil.getDecimal(value, pos).toPlainString());
      } else if (info == 16) {  // a long string: a 4-byte length, then its bytes
        quote(value, pos + 5, VariantUtil.readUnsigned(value, pos + 1, 4), out);
      } else {
        // The rest (doubles, floats, dates, timestamps, binary, UUIDs): Spark's own text.
        byte[] text = scalarJson(value, metadata, pos).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        out.put(text, 0, text.length);
      }
    }

    /** to_json's text of the scalar at pos, from a copy of the value alone (a scalar does not use the
     * metadata); timestamps in the session's zone, as to_json writes them. */
    static String scalarJson(byte[] value, byte[] metadata, int pos) {
      byte[] scalar = java.util.Arrays.copyOfRange(value, pos, pos + VariantUtil.valueSize(value, pos));
      String zone = org.apache.spark.sql.internal.SQLConf.get().sessionLocalTimeZone();
      return new Variant(scalar, metadata).toJson(java.time.ZoneId.of(zone));
    }

    /** A decimal of 4 or 8 bytes (a scale byte, then the unscaled value) as Spark writes it,
     * getDecimal(...).toPlainString(): without the fraction's trailing zeros. */
    private static void decimal(byte[] value, int pos, int bytes, Text out) {
      StrippedDecimal decimal = new StrippedDecimal(value, pos, bytes);
      long unscaled = decimal.unscaled;
      int scale = decimal.scale;
      // At most 18 digits (a decimal of 8 bytes), so the magnitude fits a long.
      if (unscaled < 0) out.put((byte) '-');
      out.decimal(Math.abs(unscaled), scale);
    }

    /** A JSON string of UTF-8 bytes with Jackson's default escapes: the quote, the backslash and the
     * control characters (the common ones short); every other byte as it is. */
    static void quote(byte[] text, int start, int length, Text out) {
      out.put((byte) '"');
      int end = start + length;
      int run = start;
      for (int i = start; i < end; i++) {
        byte c = text[i];
        if (c == '"' || c == '\\' || (c >= 0 && c < 0x20)) {
          out.put(text, run, i - run);
          run = i + 1;
          out.escape(c, HEX);
        }
      }
      out.put(text, run, end - run);
      out.put((byte) '"');
    }
  }

  /** The character a JSON escape stands for, given the byte after its backslash: the short escapes
   * (quote, backslash, slash, n, t, r, b, f); -1 for anything else (a \\u escape is the caller's). */
  static int shortEscape(byte e) {
    if (e == '"' || e == '\\' || e == '/') return e;
    if (e == 'n') return '\n';
    if (e == 't') return '\t';
    if (e == 'r') return '\r';
    if (e == 'b') return '\b';
    if (e == 'f') return '\f';
    return -1;
  }

  /** Null for ASCII text; else the text's bytes as Java reads them into a String and writes them
   * back, as Spark's to_json does: each sequence that is not UTF-8 becomes U+FFFD. */
  static byte[] asJavaReadsIt(byte[] text, int start, int length) {
    for (int i = start; i < start + length; i++) {
      if (text[i] < 0) {
        return new String(text, start, length, java.nio.charset.StandardCharsets.UTF_8)
            .getBytes(java.nio.charset.StandardCharsets.UTF_8);
      }
    }
    return null;
  }

  /** Where an object's parts lie in a variant's value, as the binary format lays them out: its header
   * byte (basic type 2; above it whether the size takes 4 bytes, and the sizes of the field ids and
   * offsets), the field count, the field ids, the fields' offsets, then the fields' values. */
  static final class ObjectBytes {
    final byte[] value;
    final int size;
    final int idSize;
    final int offsetSize;
    final int ids;
    final int offsets;
    final int data;

    ObjectBytes(byte[] value, int pos) {
      this.value = value;
      int info = (value[pos] & 0xFF) >> 2;
      int sizeBytes = (info & 16) != 0 ? 4 : 1;
      idSize = ((info >> 2) & 3) + 1;
      offsetSize = (info & 3) + 1;
      size = VariantUtil.readUnsigned(value, pos + 1, sizeBytes);
      ids = pos + 1 + sizeBytes;
      offsets = ids + size * idSize;
      data = offsets + (size + 1) * offsetSize;
    }

    /** The key id of field i (fields are in key order). */
    int id(int i) {
      return VariantUtil.readUnsigned(value, ids + i * idSize, idSize);
    }

    /** Where field i's value starts. */
    int field(int i) {
      return data + VariantUtil.readUnsigned(value, offsets + i * offsetSize, offsetSize);
    }
  }

  /** Where an array's elements lie in a variant's value: its header byte (basic type 3; above it
   * whether the size takes 4 bytes, and the offsets' size), the element count, the elements' offsets,
   * then the elements. */
  static final class ArrayBytes {
    final byte[] value;
    final int size;
    final int offsetSize;
    final int offsets;
    final int data;

    ArrayBytes(byte[] value, int pos) {
      this.value = value;
      int info = (value[pos] & 0xFF) >> 2;
      int sizeBytes = (info & 4) != 0 ? 4 : 1;
      offsetSize = (info & 3) + 1;
      size = VariantUtil.readUnsigned(value, pos + 1, sizeBytes);
      offsets = pos + 1 + sizeBytes;
      data = offsets + (size + 1) * offsetSize;
    }

    /** Where element i starts. */
    int element(int i) {
      return data + VariantUtil.readUnsigned(value, offsets + i * offsetSize, offsetSize);
    }
  }

  /** A decimal of 4 or 8 bytes (a scale byte, then the unscaled value, little-endian) without its
   * fraction's trailing zeros, as Spark's VariantUtil.getDecimal strips them. */
  static final class StrippedDecimal {
    final long unscaled;
    final int scale;

    StrippedDecimal(byte[] value, int pos, int bytes) {
      int digitsAfterPoint = value[pos + 1] & 0xFF;
      long number = 0;
      for (int k = bytes - 1; k >= 0; k--) number = (number << 8) | (value[pos + 2 + k] & 0xFF);
      if (bytes == 4) number = (int) number;
      while (digitsAfterPoint > 0 && number % 10 == 0) {
        number /= 10;
        digitsAfterPoint--;
      }
      unscaled = number;
      scale = digitsAfterPoint;
    }
  }

  /** The keys of a variant's metadata: a header byte (the offset size in its top two bits), the key
   * count, the keys' offsets, then the keys' UTF-8 bytes. */
  static final class KeyBytes {
    final byte[] metadata;
    final int offsetSize;
    final int count;
    final int keys;

    KeyBytes(byte[] metadata) {
      this.metadata = metadata;
      offsetSize = ((metadata[0] >> 6) & 3) + 1;
      count = VariantUtil.readUnsigned(metadata, 1, offsetSize);
      keys = 1 + (count + 2) * offsetSize;
    }

    /** Where key k starts among the keys' bytes (offset(count): where they end). */
    int offset(int k) {
      return VariantUtil.readUnsigned(metadata, 1 + (k + 1) * offsetSize, offsetSize);
    }

    int start(int id) {
      return keys + offset(id);
    }

    int length(int id) {
      return offset(id + 1) - offset(id);
    }
  }

  /** What a task thread keeps from row to row: its scratch buffer for text (a buffer of its own per
   * row, regrown while the row's text is written, was a fifth of the bytes the driver allocated for a
   * pipeline writing OpenCDC lines) and the last maps it wrote. Looked up by the thread's id in a
   * small table first: Spark's task threads hold many ThreadLocals, and lookups that missed their
   * first slot were 2% of a custom.python pipeline's driver samples. A thread whose id shares a slot
   * with another's gets its own from the ThreadLocal and takes the slot; an entry's owner is final,
   * so no thread ever uses another's. */
  static final class PerThread {
    private static final PerThread[] SLOTS = new PerThread[16];
    private static final ThreadLocal LOCAL =
        new ThreadLocal() {
          protected Object initialValue() {
            return new PerThread(Thread.currentThread().getId());
          }
        };
    final long thread;
    final Text text = new Text(512);
    final MapJson.Last mapAlone = new MapJson.Last();
    final MapJson.Last mapInLine = new MapJson.Last();
    final Variants variants = new Variants();

    private PerThread(long thread) {
      this.thread = thread;
    }

    static PerThread current() {
      long id = Thread.currentThread().getId();
      int slot = (int) (id & 15);
      PerThread state = SLOTS[slot];
      if (state == null || state.thread != id) {
        state = (PerThread) LOCAL.get();
        SLOTS[slot] = state;
      }
      return state;
    }
  }

  /** A growing buffer of bytes (ByteArrayOutputStream's methods are synchronized). */
  static final class Text {
    /** A scratch buffer grown past this for a large row is let go after it (not kept per thread). */
    private static final int KEPT_CAPACITY = 1 << 20;

    byte[] bytes;
    int size;

    Text(int capacity) {
      bytes = new byte[capacity];
    }

    /** This thread's scratch buffer, empty. A function takes it once per call and leaves with
     * {@link #string()}: nothing it calls takes it again. */
    static Text scratch() {
      Text text = PerThread.current().text;
      text.size = 0;
      return text;
    }

    /** The text written so far, as a string of its own (the buffer is written again next row). */
    org.apache.spark.unsafe.types.UTF8String string() {
      byte[] copy = java.util.Arrays.copyOf(bytes, size);
      if (bytes.length > KEPT_CAPACITY) bytes = new byte[512];
      return org.apache.spark.unsafe.types.UTF8String.fromBytes(copy);
    }

    void put(byte b) {
      if (size == bytes.length) bytes = java.util.Arrays.copyOf(bytes, bytes.length * 2 + 16);
      bytes[size++] = b;
    }

    void put(byte[] from, int start, int length) {
      if (size + length > bytes.length) {
        bytes = java.util.Arrays.copyOf(bytes, Math.max(bytes.length * 2, size + length) + 16);
      }
      System.arraycopy(from, start, bytes, size, length);
      size += length;
    }

    /** A character JSON writers escape (the quote, the backslash, a control character): the short
     * escapes \", \\, \n, \t, \r, \b, \f, the others as \\u00 and two digits of hex. */
    void escape(int c, byte[] hex) {
      put((byte) '\\');
      if (c == '"' || c == '\\') {
        put((byte) c);
      } else if (c == '\n') {
        put((byte) 'n');
      } else if (c == '\t') {
        put((byte) 't');
      } else if (c == '\r') {
        put((byte) 'r');
      } else if (c == '\b') {
        put((byte) 'b');
      } else if (c == '\f') {
        put((byte) 'f');
      } else {
        ascii("u00");
        put(hex[c >> 4]);
        put(hex[c & 15]);
      }
    }

    /** A long's decimal digits, as Long.toString writes them (without making a String). */
    void number(long value) {
      if (value == Long.MIN_VALUE) {
        ascii(Long.toString(value));
        return;
      }
      if (value < 0) {
        put((byte) '-');
        value = -value;
      }
      decimal(value, 0);
    }

    /** The digits of a magnitude (not negative) with a point before its last scale digits: 0.0ddd
     * when it has no more digits than that, no point when scale is 0. */
    void decimal(long magnitude, int scale) {
      int count = 1;
      for (long rest = magnitude; rest >= 10; rest /= 10) count++;
      int whole = count - scale;
      if (whole <= 0) {
        ascii("0.");
        for (int k = whole; k < 0; k++) put((byte) '0');
        scale = 0;
      }
      int length = scale > 0 ? count + 1 : count;
      if (size + length > bytes.length) {
        bytes = java.util.Arrays.copyOf(bytes, Math.max(bytes.length * 2, size + length) + 16);
      }
      int end = size + length;
      int i = end;
      for (int k = 0; k < scale; k++) {
        bytes[--i] = (byte) ('0' + magnitude % 10);
        magnitude /= 10;
      }
      if (scale > 0) bytes[--i] = (byte) '.';
      do {
        bytes[--i] = (byte) ('0' + magnitude % 10);
        magnitude /= 10;
      } while (i > size);
      size = end;
    }

    void ascii(String text) {
      int length = text.length();
      if (size + length > bytes.length) {
        bytes = java.util.Arrays.copyOf(bytes, Math.max(bytes.length * 2, size + length) + 16);
      }
      for (int i = 0; i < length; i++) bytes[size++] = (byte) text.charAt(i);
    }
  }

  public static final class VariantSet implements org.apache.spark.sql.api.java.UDF3 {
    /** The last key set and its UTF-8 bytes: a field.set sets one key on every row, and encoding it
     * per row was 3% of a file pipeline's driver samples. Immutable, so a thread that reads another
     * thread's is still right. */
    private transient Key last;

    static final class Key {
      final String name;
      final byte[] bytes;

      Key(String name) {
        this.name = name;
        this.bytes = name.getBytes(java.nio.charset.StandardCharsets.UTF_8);
      }
    }

    public Object call(Object object, Object key, Object value) {
      String name = (String) key;
      if (object != null) {
        Key known = last;
        if (known == null || !known.name.equals(name)) {
          known = new Key(name);
          last = known;
        }
        VariantVal set = (VariantVal) value;
        VariantVal fast = Splice.of((VariantVal) object, known, set == null ? null : set.getValue());
        if (fast != null) return fast;
      }
      return built(object, name, value);
    }

    /** Through Spark's VariantBuilder: any object and value. */
    private static Object built(Object object, String name, Object value) {
      VariantBuilder builder = new VariantBuilder(false);
      java.util.ArrayList fields = new java.util.ArrayList();
      int start = builder.getWritePos();
      if (object != null) {
        VariantVal given = (VariantVal) object;
        Variant base = new Variant(given.getValue(), given.getMetadata());
        if (base.getType() == VariantUtil.Type.OBJECT) {
          int size = base.objectSize();
          for (int i = 0; i < size; i++) {
            Variant.ObjectField field = base.getFieldAtIndex(i);
            if (field.key.equals(name)) continue;
            int id = builder.addKey(field.key);
            fields.add(new VariantBuilder.FieldEntry(field.key, id, builder.getWritePos() - start));
            builder.appendVariant(field.value);
          }
        }
      }
      int id = builder.addKey(name);
      fields.add(new VariantBuilder.FieldEntry(name, id, builder.getWritePos() - start));
      if (value == null) {
        builder.appendNull();
      } else {
        VariantVal set = (VariantVal) value;
        builder.appendVariant(new Variant(set.getValue(), set.getMetadata()));
      }
      builder.finishWritingObject(start, fields);
      Variant result = builder.result();
      return new VariantVal(result.getValue(), result.getMetadata());
    }
  }

  /** An object with one field set, spliced from its bytes: its metadata's keys stay (the key is
   * appended when new, so the object's own ids, nested ones too, still hold), its fields' values are
   * copied as they are, and the field goes where its key sorts. No key is decoded and nothing is
   * rebuilt, where VariantBuilder decodes and hashes every key, sorts the fields and copies all
   * twice. of() gives null for what it leaves to the builder: a base that is not an object, a value
   * that is an object or array (its ids are another metadata's), a metadata of over 64 keys, a
   * result over Spark's size limit. */
  static final class Splice {
    static VariantVal of(VariantVal object, VariantSet.Key key, byte[] setValue) {
      String name = key.name;
      byte[] value = object.getValue();
      byte[] metadata = object.getMetadata();
      if ((value[0] & 3) != 2) return null;
      if (setValue != null && ((setValue[0] & 3) == 2 || (setValue[0] & 3) == 3)) return null;
      ObjectBytes base = new ObjectBytes(value, 0);
      KeyBytes keys = new KeyBytes(metadata);
      if (keys.count > 64) return null;
      byte[] nameBytes = key.bytes;
      int nameId = -1;
      for (int k = 0; k < keys.count && nameId < 0; k++) {
        if (keys.length(k) == nameBytes.length && regionEquals(metadata, keys.start(k), nameBytes)) nameId = k;
      }
      byte[] newMetadata = metadata;
      if (nameId < 0) {
        nameId = keys.count;
        newMetadata = appendKey(keys, nameBytes);
      }

      // The fields in key order: the base's (sorted already) without the key, and the key at its place.
      int[] fieldIds = new int[base.size + 1];
      int[] starts = new int[base.size + 1];
      int[] lengths = new int[base.size + 1];
      int setLength = setValue == null ? 1 : VariantUtil.valueSize(setValue, 0);
      int count = 0;
      int at = -1;
      int dataSize = setLength;
      for (int i = 0; i < base.size; i++) {
        int id = base.id(i);
        if (id == nameId) continue;
        if (at < 0 && compareKey(keys, id, nameBytes, name) > 0) at = count++;
        fieldIds[count] = id;
        starts[count] = base.field(i);
        lengths[count] = VariantUtil.valueSize(value, starts[count]);
        dataSize += lengths[count++];
      }
      if (at < 0) at = count++;
      fieldIds[at] = nameId;
      starts[at] = -1;
      lengths[at] = setLength;
      int maxId = 0;
      for (int i = 0; i < count; i++) maxId = Math.max(maxId, fieldIds[i]);
      boolean large = count > 255;
      int newSizeBytes = large ? 4 : 1;
      int newIdSize = integerSize(maxId);
      int newOffsetSize = integerSize(dataSize);
      int newIds = 1 + newSizeBytes;
      int newOffsets = newIds + count * newIdSize;
      int newData = newOffsets + (count + 1) * newOffsetSize;
      long total = (long) newData + dataSize;
      if (total > VariantUtil.SIZE_LIMIT || newMetadata.length > VariantUtil.SIZE_LIMIT) return null;
      byte[] out = new byte[(int) total];
      out[0] = VariantUtil.objectHeader(large, newIdSize, newOffsetSize);
      VariantUtil.writeLong(out, 1, count, newSizeBytes);
      int offset = 0;
      for (int i = 0; i < count; i++) {
        VariantUtil.writeLong(out, newIds + i * newIdSize, fieldIds[i], newIdSize);
        VariantUtil.writeLong(out, newOffsets + i * newOffsetSize, offset, newOffsetSize);
        if (starts[i] >= 0) {
          System.arraycopy(value, starts[i], out, newData + offset, lengths[i]);
        } else if (setValue == null) {
          out[newData + offset] = VariantUtil.primitiveHeader(VariantUtil.NULL);
        } else {
          System.arraycopy(setValue, 0, out, newData + offset, lengths[i]);
        }
        offset += lengths[i];
      }
      VariantUtil.writeLong(out, newOffsets + count * newOffsetSize, offset, newOffsetSize);
      return new VariantVal(out, newMetadata);
    }

    /** The fewest bytes that hold n (1 to 4), as VariantBuilder sizes ids and offsets. */
    static int integerSize(int n) {
      return n <= 0xFF ? 1 : n <= 0xFFFF ? 2 : n <= 0xFFFFFF ? 3 : 4;
    }

    private static boolean regionEquals(byte[] bytes, int from, byte[] other) {
      for (int i = 0; i < other.length; i++) {
        if (bytes[from + i] != other[i]) return false;
      }
      return true;
    }

    /** The order of key id against the new key, as VariantBuilder sorts fields: by String.compareTo.
     * For ASCII keys that is the order of the bytes; others are decoded and compared as Strings. */
    private static int compareKey(KeyBytes keys, int id, byte[] nameBytes, String name) {
      byte[] metadata = keys.metadata;
      int from = keys.start(id);
      int length = keys.length(id);
      boolean ascii = true;
      for (int i = 0; i < length && ascii; i++) ascii = metadata[from + i] >= 0;
      for (int i = 0; i < nameBytes.length && ascii; i++) ascii = nameBytes[i] >= 0;
      if (!ascii) {
        return new String(metadata, from, length, java.nio.charset.StandardCharsets.UTF_8).compareTo(name);
      }
      int common = Math.min(length, nameBytes.length);
      for (int i = 0; i < common; i++) {
        int d = metadata[from + i] - nameBytes[i];
        if (d != 0) return d;
      }
      return length - nameBytes.length;
    }

    /** The metadata with one key more, at the end (so no id changes); its keys no longer sorted. */
    private static byte[] appendKey(KeyBytes keys, byte[] name) {
      int keyBytes = keys.offset(keys.count);
      int newCount = keys.count + 1;
      int newKeyBytes = keyBytes + name.length;
      int newOffsetSize = integerSize(Math.max(newKeyBytes, newCount));
      int newKeys = 1 + (newCount + 2) * newOffsetSize;
      byte[] out = new byte[newKeys + newKeyBytes];
      out[0] = (byte) (VariantUtil.VERSION | ((newOffsetSize - 1) << 6));
      VariantUtil.writeLong(out, 1, newCount, newOffsetSize);
      for (int k = 0; k <= keys.count; k++) {
        VariantUtil.writeLong(out, 1 + (k + 1) * newOffsetSize, keys.offset(k), newOffsetSize);
      }
      VariantUtil.writeLong(out, 1 + (newCount + 1) * newOffsetSize, newKeyBytes, newOffsetSize);
      System.arraycopy(keys.metadata, keys.keys, out, newKeys, keyBytes);
      System.arraycopy(name, 0, out, newKeys + keyBytes, name.length);
      return out;
    }
  }

  /** A builder of StaticInvoke expressions (what the SQL function registry calls with the arguments'
   * expressions): Spark's generated code calls the static method with Spark's own values. */
  abstract static class Invoker extends scala.runtime.AbstractFunction1 {
    private final Class target;
    private final String method;
    private final org.apache.spark.sql.types.DataType type;
    private final int arity;
    private final boolean propagateNull;
    private final String usage;

    /** propagateNull: a null argument gives null without a call; usage: the error for other arities. */
    Invoker(Class target, String method, String type, int arity, boolean propagateNull, String usage) {
      this.target = target;
      this.method = method;
      this.type = org.apache.spark.sql.types.DataType.fromDDL(type);
      this.arity = arity;
      this.propagateNull = propagateNull;
      this.usage = usage;
    }

    public Object apply(Object arguments) {
      scala.collection.immutable.Seq children = (scala.collection.immutable.Seq) arguments;
      if (children.length() != arity) {
        throw new IllegalArgumentException(usage);
      }
      return new org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke(
          target, type, method, children,
          (scala.collection.immutable.Seq) scala.collection.immutable.Nil$.MODULE$, propagateNull, true,
          true, scala.None$.MODULE$);
    }
  }

  /** conduit_map_json(MAP<STRING, STRING>) -> STRING: to_json of a map of strings, the same text
   * (entries in the map's order, strings with Jackson's default escapes, a null value as null).
   * Spark's to_json sets up a Jackson generator and writes each row through chars (a fifth of the
   * OpenCDC line's cost); a Java UDF would get the map converted into a Scala map per row. This is a
   * static method Spark's generated code calls with the map as Spark holds it (StaticInvoke, made by
   * MapJsonBuilder when the SQL names the function). */
  public static final class MapJson {
    public static org.apache.spark.unsafe.types.UTF8String write(
        org.apache.spark.sql.catalyst.util.MapData map) {
      Last last = PerThread.current().mapAlone;
      if (!last.holds(map)) {
        Text out = Text.scratch();
        entries(map, out);
        last.keep(map, out.string());
      }
      return last.text;
    }

    /** The map's text into out (an OpenCDC line's metadata). */
    static void write(org.apache.spark.sql.catalyst.util.MapData map, Text out) {
      Last last = PerThread.current().mapInLine;
      if (!last.holds(map)) {
        int start = out.size;
        entries(map, out);
        last.keep(map, org.apache.spark.unsafe.types.UTF8String.fromBytes(
            java.util.Arrays.copyOfRange(out.bytes, start, out.size)));
        return;
      }
      byte[] text = last.text.getBytes();
      out.put(text, 0, text.length);
    }

    /** A map and its text. A source's records mostly share their metadata (the batch's read time,
     * the connector), so a row's map is compared byte for byte with the row's before (its bytes as
     * Spark holds them) rather than written again: the metadata's text was 6% of the driver's
     * samples in a custom.python pipeline, written once per row for the Python worker and once for
     * the line. */
    static final class Last {
      byte[] map;
      org.apache.spark.unsafe.types.UTF8String text;

      /** Whether map is the one kept (only a map in Spark's binary layout is compared). */
      boolean holds(org.apache.spark.sql.catalyst.util.MapData map) {
        if (map == null || !(map instanceof org.apache.spark.sql.catalyst.expressions.UnsafeMapData)) {
          return false;
        }
        org.apache.spark.sql.catalyst.expressions.UnsafeMapData unsafe =
            (org.apache.spark.sql.catalyst.expressions.UnsafeMapData) map;
        int size = unsafe.getSizeInBytes();
        return this.map != null && this.map.length == size
            && org.apache.spark.unsafe.array.ByteArrayMethods.arrayEquals(unsafe.getBaseObject(),
                unsafe.getBaseOffset(), this.map, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET,
                size);
      }

      void keep(org.apache.spark.sql.catalyst.util.MapData map,
          org.apache.spark.unsafe.types.UTF8String text) {
        this.text = text;
        this.map = null;
        if (map instanceof org.apache.spark.sql.catalyst.expressions.UnsafeMapData) {
          org.apache.spark.sql.catalyst.expressions.UnsafeMapData unsafe =
              (org.apache.spark.sql.catalyst.expressions.UnsafeMapData) map;
          byte[] bytes = new byte[unsafe.getSizeInBytes()];
          org.apache.spark.unsafe.Platform.copyMemory(unsafe.getBaseObject(), unsafe.getBaseOffset(),
              bytes, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET, bytes.length);
          this.map = bytes;
        }
      }
    }

    private static void entries(org.apache.spark.sql.catalyst.util.MapData map, Text out) {
      org.apache.spark.sql.catalyst.util.ArrayData keys = map.keyArray();
      org.apache.spark.sql.catalyst.util.ArrayData values = map.valueArray();
      int size = map.numElements();
      out.put((byte) '{');
      for (int i = 0; i < size; i++) {
        if (i > 0) out.put((byte) ',');
        string(keys.getUTF8String(i), out);
        out.put((byte) ':');
        if (values.isNullAt(i)) {
          out.ascii("null");
        } else {
          string(values.getUTF8String(i), out);
        }
      }
      out.put((byte) '}');
    }

    /** Text that is not ASCII goes through a Java String, as to_json's does: a byte sequence that is
     * not UTF-8 becomes U+FFFD. */
    static void string(org.apache.spark.unsafe.types.UTF8String text, Text out) {
      // The string's own bytes where Spark holds them in an array (a row's): no copy of each.
      Object base = text.getBaseObject();
      byte[] bytes;
      int start = 0;
      int length = text.numBytes();
      if (base instanceof byte[]) {
        bytes = (byte[]) base;
        start = (int) (text.getBaseOffset() - org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET);
      } else {
        bytes = text.getBytes();
      }
      if (!quoteAscii(bytes, start, length, out)) {
        byte[] valid = asJavaReadsIt(bytes, start, length);
        VariantJson.quote(valid, 0, valid.length, out);
      }
    }

    /** VariantJson.quote of ASCII text, in the same pass that checks it is ASCII: false (and nothing
     * written) at the first byte that is not. */
    private static boolean quoteAscii(byte[] text, int start, int length, Text out) {
      int mark = out.size;
      out.put((byte) '"');
      int end = start + length;
      int run = start;
      for (int i = start; i < end; i++) {
        byte c = text[i];
        if (c < 0) {
          out.size = mark;
          return false;
        }
        if (c == '"' || c == '\\' || c < 0x20) {
          out.put(text, run, i - run);
          run = i + 1;
          out.escape(c, VariantJson.HEX);
        }
      }
      out.put(text, run, end - run);
      out.put((byte) '"');
      return true;
    }
  }

  /** conduit_opencdc_line(position, operation, metadata, key, key_raw, before, before_raw, after,
   * after_raw) -> STRING: the record as one OpenCDC JSON line, the text of to_json of the OpenCDC
   * struct with nulls kept (base64 of binary never split into lines), written into one buffer: a
   * concat of each part's text cost an allocation and a copy per part, and a raw field went through
   * a VARIANT of its base64. */
  public static final class OpencdcLine {
    private static final byte[] BASE64 =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            .getBytes(java.nio.charset.StandardCharsets.US_ASCII);

    public static org.apache.spark.unsafe.types.UTF8String write(byte[] position,
        org.apache.spark.unsafe.types.UTF8String operation,
        org.apache.spark.sql.catalyst.util.MapData metadata, VariantVal key, byte[] keyRaw,
        VariantVal before, byte[] beforeRaw, VariantVal after, byte[] afterRaw) {
      Text out = Text.scratch();
      out.ascii("{\"position\":");
      if (position == null) {
        out.ascii("null");
      } else {
        base64(position, out);
      }
      out.ascii(",\"operation\":");
      if (operation == null) {
        out.ascii("null");
      } else {
        MapJson.string(operation, out);
      }
      out.ascii(",\"metadata\":");
      if (metadata == null) {
        out.ascii("null");
      } else {
        MapJson.write(metadata, out);
      }
      out.ascii(",\"key\":");
      data(key, keyRaw, out);
      out.ascii(",\"payload\":{\"before\":");
      data(before, beforeRaw, out);
      out.ascii(",\"after\":");
      data(after, afterRaw, out);
      out.ascii("}}");
      return out.string();
    }

    /** A data field as OpenCDC JSON writes it: structured data as its JSON, raw data as a string of
     * its base64. */
    private static void data(VariantVal structured, byte[] raw, Text out) {
      if (structured != null) {
        VariantJson.write(structured.getValue(), structured.getMetadata(), 0, out);
      } else if (raw != null) {
        base64(raw, out);
      } else {
        out.ascii("null");
      }
    }

    /** The bytes as a JSON string of their base64 (RFC 4648, padded, one line). */
    static void base64(byte[] bytes, Text out) {
      out.put((byte) '"');
      int whole = bytes.length - bytes.length % 3;
      for (int i = 0; i < whole; i += 3) {
        int bits = (bytes[i] & 0xFF) << 16 | (bytes[i + 1] & 0xFF) << 8 | (bytes[i + 2] & 0xFF);
        out.put(BASE64[bits >>> 18]);
        out.put(BASE64[(bits >>> 12) & 63]);
        out.put(BASE64[(bits >>> 6) & 63]);
        out.put(BASE64[bits & 63]);
      }
      int left = bytes.length - whole;
      if (left > 0) {
        int bits = (bytes[whole] & 0xFF) << 16 | (left == 2 ? (bytes[whole + 1] & 0xFF) << 8 : 0);
        out.put(BASE64[bits >>> 18]);
        out.put(BASE64[(bits >>> 12) & 63]);
        out.put(left == 2 ? BASE64[(bits >>> 6) & 63] : (byte) '=');
        out.put((byte) '=');
      }
      out.put((byte) '"');
    }
  }

  /** What the SQL function registry calls to make conduit_opencdc_line(...): a StaticInvoke of
   * OpencdcLine.write (nulls passed on: a null part is written as null). */
  public static final class OpencdcLineBuilder extends Invoker {
    public OpencdcLineBuilder() {
      super(OpencdcLine.class, "write", "string", 9, false,
          "conduit_opencdc_line takes position, operation, metadata, key, key_raw, before, before_raw,"
              + " after, after_raw");
    }
  }

  /** What the SQL function registry calls to make conduit_map_json(m): a StaticInvoke of MapJson.write
   * (null for a null map). */
  public static final class MapJsonBuilder extends Invoker {
    public MapJsonBuilder() {
      super(MapJson.class, "write", "string", 1, true, "conduit_map_json takes one map of strings");
    }
  }

  /** conduit_json_map(STRING) -> MAP<STRING, STRING>: a JSON object whose values are strings or null
   * (what conduit_map_json writes, and what a Python mapper writes for the metadata it changed) as a
   * map, entries in the text's order. The metadata crosses to Python's workers and back as this text:
   * a map column costs Spark's Arrow writer a struct of two vectors per row, and its per-row size
   * check walks them. Anything else (a number, a nested value, text after the object) is refused:
   * only the engine's own mappers write this text. */
  public static final class JsonMap {
    public static org.apache.spark.sql.catalyst.util.MapData read(
        org.apache.spark.unsafe.types.UTF8String text) {
      byte[] b = text.getBytes();
      JsonMap reader = new JsonMap(b);
      return reader.object();
    }

    private final byte[] b;
    private int i;

    private JsonMap(byte[] bytes) {
      b = bytes;
    }

    private org.apache.spark.sql.catalyst.util.MapData object() {
      java.util.ArrayList keys = new java.util.ArrayList();
      java.util.ArrayList values = new java.util.ArrayList();
      space();
      expect('{');
      space();
      if (peek() == '}') {
        i++;
      } else {
        while (true) {
          space();
          keys.add(string());
          space();
          expect(':');
          space();
          if (peek() == 'n') {
            word("null");
            values.add(null);
          } else {
            values.add(string());
          }
          space();
          byte c = next();
          if (c == '}') break;
          if (c != ',') refuse("a comma or a closing brace");
        }
      }
      space();
      if (i != b.length) refuse("the end of the text");
      return new org.apache.spark.sql.catalyst.util.ArrayBasedMapData(
          new org.apache.spark.sql.catalyst.util.GenericArrayData(keys.toArray()),
          new org.apache.spark.sql.catalyst.util.GenericArrayData(values.toArray()));
    }

    /** A string's UTF-8 bytes as they are where it has no escape; else decoded as Jackson decodes it
     * (a lone surrogate escape becomes '?' once the String is encoded, as in Spark's from_json). */
    private org.apache.spark.unsafe.types.UTF8String string() {
      expect('"');
      int start = i;
      while (i < b.length && b[i] != '"' && b[i] != '\\') i++;
      if (i < b.length && b[i] == '"') {
        i++;
        return org.apache.spark.unsafe.types.UTF8String.fromBytes(
            java.util.Arrays.copyOfRange(b, start, i - 1));
      }
      StringBuilder out = new StringBuilder(
          new String(b, start, i - start, java.nio.charset.StandardCharsets.UTF_8));
      while (true) {
        int run = i;
        while (i < b.length && b[i] != '"' && b[i] != '\\') i++;
        out.append(new String(b, run, i - run, java.nio.charset.StandardCharsets.UTF_8));
        byte c = next();
        if (c == '"') break;
        byte e = next();
        int simple = shortEscape(e);
        if (simple >= 0) {
          out.append((char) simple);
        } else if (e == 'u') {
          if (i + 4 > b.length) refuse("four hex digits");
          out.append((char) Integer.parseInt(new String(b, i, 4, java.nio.charset.StandardCharsets.ISO_8859_1), 16));
          i += 4;
        } else {
          refuse("an escape");
        }
      }
      return org.apache.spark.unsafe.types.UTF8String.fromString(out.toString());
    }

    private void space() {
      while (i < b.length && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) i++;
    }

    private byte peek() {
      if (i >= b.length) refuse("more text");
      return b[i];
    }

    private byte next() {
      byte c = peek();
      i++;
      return c;
    }

    private void expect(char c) {
      if (next() != c) refuse("'" + c + "'");
    }

    private void word(String w) {
      for (int k = 0; k < w.length(); k++) expect(w.charAt(k));
    }

    private void refuse(String wanted) {
      throw new IllegalArgumentException("conduit_json_map: expected " + wanted + " at byte " + i
          + " of a JSON object of strings");
    }
  }

  /** What the SQL function registry calls to make conduit_json_map(text): a StaticInvoke of
   * JsonMap.read (null for a null text). */
  public static final class JsonMapBuilder extends Invoker {
    public JsonMapBuilder() {
      super(JsonMap.class, "read", "map<string,string>", 1, true, "conduit_json_map takes one string");
    }
  }

  /** conduit_go_json(VARIANT, BOOLEAN) -> STRING: the value as Go's encoding/json writes what a
   * template's toJson (true: HTML escaped) or toRawJson (false) gets for it, which is the value read
   * back from its to_json text (airflow_conduit/gotemplate/gojson.py, byte for byte): keys sorted by
   * their bytes, integers as they are, fractions as the shortest float64 that reads back, strings with
   * Go's escapes. The rarer scalars (dates, timestamps, binary, UUIDs, floats, NaN) are read from Spark's
   * own text of them, as the Python side reads them. */
  public static final class GoJson implements org.apache.spark.sql.api.java.UDF2 {
    private static final byte[] HEX = {
      (byte) '0', (byte) '1', (byte) '2', (byte) '3', (byte) '4', (byte) '5', (byte) '6', (byte) '7',
      (byte) '8', (byte) '9', (byte) 'a', (byte) 'b', (byte) 'c', (byte) 'd', (byte) 'e', (byte) 'f'};

    public Object call(Object value, Object escapeHtml) {
      if (value == null) return null;
      VariantVal variant = (VariantVal) value;
      byte[] data = variant.getValue();
      Text out = Text.scratch();
      write(data, variant.getMetadata(), 0, Boolean.TRUE.equals(escapeHtml), out);
      return out.string();
    }

    private static void write(byte[] value, byte[] metadata, int pos, boolean html, Text out) {
      int header = value[pos] & 0xFF;
      int basic = header & 3;
      int info = header >> 2;
      if (basic == 1) {
        string(value, pos + 1, info, html, out);
      } else if (basic == 2) {
        ObjectBytes object = new ObjectBytes(value, pos);
        KeyBytes keys = new KeyBytes(metadata);
        int[] order = byteOrder(object, keys);
        out.put((byte) '{');
        for (int i = 0; i < object.size; i++) {
          if (i > 0) out.put((byte) ',');
          int field = order == null ? i : order[i];
          int id = object.id(field);
          string(metadata, keys.start(id), keys.length(id), html, out);
          out.put((byte) ':');
          write(value, metadata, object.field(field), html, out);
        }
        out.put((byte) '}');
      } else if (basic == 3) {
        ArrayBytes array = new ArrayBytes(value, pos);
        out.put((byte) '[');
        for (int i = 0; i < array.size; i++) {
          if (i > 0) out.put((byte) ',');
          write(value, metadata, array.element(i), html, out);
        }
        out.put((byte) ']');
      } else if (info == 0) {
        out.ascii("null");
      } else if (info == 1) {
        out.ascii("true");
      } else if (info == 2) {
        out.ascii("false");
      } else if (info >= 3 && info <= 6) {
        out.number(VariantUtil.getLong(value, pos));
      } else if (info == 7 && isFinite(VariantUtil.getDouble(value, pos))) {
        goFloat(VariantUtil.getDouble(value, pos), out);
      } else if (info == 8 || info == 9) {
        decimal(value, pos, info == 8 ? 4 : 8, out);
      } else if (info == 16) {
        string(value, pos + 5, VariantUtil.readUnsigned(value, pos + 1, 4), html, out);
      } else {
        sparkText(value, metadata, pos, html, out);
      }
    }

    private static boolean isFinite(double number) {
      return !Double.isNaN(number) && !Double.isInfinite(number);
    }

    /** null when the object's fields are in the order of their keys' bytes (Go's order; Spark sorts
     * them by String.compareTo, which differs past U+D7FF), else the fields in that order. */
    private static int[] byteOrder(ObjectBytes object, KeyBytes keys) {
      int k = 1;
      while (k < object.size && compareKeys(object, keys, k - 1, k) < 0) k++;
      if (k >= object.size) return null;
      int[] order = new int[object.size];
      for (int i = 0; i < order.length; i++) order[i] = i;
      for (int i = 1; i < order.length; i++) {  // insertion sort: only such rare objects get here
        int field = order[i];
        int j = i - 1;
        while (j >= 0 && compareKeys(object, keys, order[j], field) > 0) {
          order[j + 1] = order[j];
          j--;
        }
        order[j + 1] = field;
      }
      return order;
    }

    private static int compareKeys(ObjectBytes object, KeyBytes keys, int a, int b) {
      int idA = object.id(a);
      int idB = object.id(b);
      int startA = keys.start(idA);
      int startB = keys.start(idB);
      int lengthA = keys.length(idA);
      int lengthB = keys.length(idB);
      int common = Math.min(lengthA, lengthB);
      for (int i = 0; i < common; i++) {
        int byteA = keys.metadata[startA + i] & 0xFF;
        int byteB = keys.metadata[startB + i] & 0xFF;
        if (byteA != byteB) return byteA - byteB;
      }
      return lengthA - lengthB;
    }

    /** A decimal of 4 or 8 bytes: to_json's text without the fraction's trailing zeros is an integer
     * (read back exactly) or a fraction (read back as a float64). Up to 15 digits, those digits are
     * the float64's shortest form (no two such decimals share a float64), so no search is needed. */
    private static void decimal(byte[] value, int pos, int bytes, Text out) {
      StrippedDecimal decimal = new StrippedDecimal(value, pos, bytes);
      long unscaled = decimal.unscaled;
      int scale = decimal.scale;
      if (scale == 0) {
        out.ascii(Long.toString(unscaled));
        return;
      }
      String digits = Long.toString(Math.abs(unscaled));
      if (digits.length() > 15) {
        goFloat(new java.math.BigDecimal(java.math.BigInteger.valueOf(unscaled), scale).doubleValue(), out);
        return;
      }
      if (unscaled < 0) out.put((byte) '-');
      goDigits(digits, digits.length() - scale, out);
    }

    /** A float64 as encoding/json writes it: the shortest digits that read back, positional from 1e-6
     * to 1e21, else with an exponent (1e+21, 1e-7). */
    static void goFloat(double number, Text out) {
      if (number == 0) {
        out.ascii(Double.doubleToRawLongBits(number) < 0 ? "-0" : "0");
        return;
      }
      if (number < 0) out.put((byte) '-');
      java.math.BigDecimal shortest = shortest(Math.abs(number));
      String digits = shortest.unscaledValue().toString();
      goDigits(digits, digits.length() - shortest.scale(), out);
    }

    /** The shortest decimal that reads back as the (positive, finite) number, the closest one of that
     * length: Java 17's Double.toString is not always the shortest, but when it has up to 15
     * significant digits no shorter decimal reads back as the same float64 (not so for subnormals,
     * which have fewer digits of precision: 4.9E-324 is 5e-324). */
    private static java.math.BigDecimal shortest(double number) {
      if (number >= Double.MIN_NORMAL) {
        java.math.BigDecimal printed = new java.math.BigDecimal(Double.toString(number)).stripTrailingZeros();
        if (printed.precision() <= 15) return printed;
      }
      java.math.BigDecimal exact = new java.math.BigDecimal(number);
      for (int precision = 1; precision < 17; precision++) {
        java.math.BigDecimal nearest = exact.round(
            new java.math.MathContext(precision, java.math.RoundingMode.HALF_EVEN));
        if (Double.parseDouble(nearest.toString()) == number) return nearest.stripTrailingZeros();
        // The nearest may fall outside where the number reads back while its neighbour on the other
        // side of the exact value is inside (a power of two's lower gap is half its upper one).
        java.math.BigDecimal other = nearest.compareTo(exact) < 0
            ? nearest.add(nearest.ulp()) : nearest.subtract(nearest.ulp());
        if (Double.parseDouble(other.toString()) == number) return other.stripTrailingZeros();
      }
      return exact.round(new java.math.MathContext(17, java.math.RoundingMode.HALF_EVEN)).stripTrailingZeros();
    }

    /** 0.DIGITS x 10^point (DIGITS without trailing zeros) as encoding/json writes a float64. */
    private static void goDigits(String digits, int point, Text out) {
      int length = digits.length();
      if (point >= -5 && point <= 21) {
        if (point <= 0) {
          out.ascii("0.");
          for (int k = point; k < 0; k++) out.put((byte) '0');
          out.ascii(digits);
        } else if (point >= length) {
          out.ascii(digits);
          for (int k = length; k < point; k++) out.put((byte) '0');
        } else {
          out.ascii(digits.substring(0, point));
          out.put((byte) '.');
          out.ascii(digits.substring(point));
        }
        return;
      }
      out.put((byte) digits.charAt(0));
      if (length > 1) {
        out.put((byte) '.');
        out.ascii(digits.substring(1));
      }
      int power = point - 1;
      out.put((byte) 'e');
      if (power >= 0) {
        out.ascii(power < 10 ? "+0" : "+");
        out.ascii(Integer.toString(power));
      } else {
        out.put((byte) '-');
        out.ascii(Integer.toString(-power));  // encoding/json trims e-07 to e-7
      }
    }

    /** The rarer scalars as the Python side reads Spark's to_json text of them: a JSON string as the
     * string, a number as a float64, NaN and infinities (Spark writes them quoted) as strings. */
    private static void sparkText(byte[] value, byte[] metadata, int pos, boolean html, Text out) {
      String text = VariantJson.scalarJson(value, metadata, pos);
      char first = text.charAt(0);
      if (first == '"') {
        String string;
        try {
          com.fasterxml.jackson.core.JsonParser parser =
              new com.fasterxml.jackson.core.JsonFactory().createParser(text);
          parser.nextToken();
          string = parser.getText();
        } catch (java.io.IOException e) {
          throw new IllegalStateException("Spark wrote a JSON string it cannot read: " + text, e);
        }
        byte[] utf8 = string.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        string(utf8, 0, utf8.length, html, out);
      } else if (text.indexOf('.') < 0 && text.indexOf('E') < 0 && text.indexOf('e') < 0
          && (first == '-' || (first >= '0' && first <= '9'))) {
        out.ascii(text);  // an integer (a decimal of 16 bytes, say) reads back exactly
      } else if (first == '-' || (first >= '0' && first <= '9')) {
        goFloat(Double.parseDouble(text), out);
      } else {
        out.ascii(text);
      }
    }

    /** A JSON string as encoding/json writes it (the Python side's json.encoder escapes): the quote,
     * the backslash, control characters (\n, \r, \t, \b, \f short, the rest as \\u00xx), U+2028 and
     * U+2029, and with html <, > and & as \\u003c, \\u003e, \\u0026. Text that is not valid UTF-8 is
     * read as Java reads it (U+FFFD for each bad sequence), as Spark's to_json does. */
    private static void string(byte[] text, int start, int length, boolean html, Text out) {
      int end = start + length;
      byte[] valid = asJavaReadsIt(text, start, length);
      if (valid != null) {
        text = valid;
        start = 0;
        end = valid.length;
      }
      out.put((byte) '"');
      int run = start;
      for (int i = start; i < end; i++) {
        int c = text[i] & 0xFF;
        if (c >= 0x20 && c != '"' && c != '\\' && c != 0xE2 && !(html && (c == '<' || c == '>' || c == '&'))) {
          continue;
        }
        if (c == 0xE2) {  // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
          if (i + 2 >= end || (text[i + 1] & 0xFF) != 0x80 || ((text[i + 2] & 0xFF) & 0xFE) != 0xA8) continue;
          out.put(text, run, i - run);
          out.ascii((text[i + 2] & 0xFF) == 0xA8 ? "\\u2028" : "\\u2029");
          i += 2;
          run = i + 1;
          continue;
        }
        out.put(text, run, i - run);
        run = i + 1;
        out.escape(c, HEX);
      }
      out.put(text, run, end - run);
      out.put((byte) '"');
    }
  }

  public static final class TryParseJson implements org.apache.spark.sql.api.java.UDF1 {
    /** The keys read lately (a source's records mostly share theirs); see JsonBytes.key. */
    private transient KeyCache keys;

    /** try_parse_json of UTF-8 bytes (a BINARY column; a STRING is encoded first). */
    public Object call(Object input) {
      if (input == null) return null;
      byte[] json = input instanceof byte[]
          ? (byte[]) input
          : ((String) input).getBytes(java.nio.charset.StandardCharsets.UTF_8);
      KeyCache cache = keys;
      if (cache == null) {
        cache = new KeyCache();
        keys = cache;
      }
      VariantVal parsed;
      try {
        parsed = new JsonBytes(json, cache).document();
      } catch (Exception e) {
        parsed = null;
      }
      // Null for a duplicate key, too large a value, ...: Spark's parser decides what it is.
      if (parsed != null) return parsed;
      org.apache.spark.sql.internal.SQLConf conf = org.apache.spark.sql.internal.SQLConf.get();
      boolean duplicateKeys = ((Boolean) conf.getConf(
          org.apache.spark.sql.internal.SQLConf.VARIANT_ALLOW_DUPLICATE_KEYS())).booleanValue();
      boolean validateUnicode = ((Boolean) conf.getConf(
          org.apache.spark.sql.internal.SQLConf.VARIANT_VALIDATE_UNICODE_IN_JSON_PARSING())).booleanValue();
      return org.apache.spark.sql.catalyst.expressions.variant.VariantExpressionEvalUtils.parseJson(
          org.apache.spark.unsafe.types.UTF8String.fromBytes(json), duplicateKeys, false, validateUnicode);
    }
  }

  /** A JSON document read from its UTF-8 bytes into Spark's VariantBuilder with the same calls, in the
   * same order, that Spark's parser (Jackson's tokens over the decoded text) makes, so the variant is
   * the same to the byte. document() gives null for anything it is not sure to read as Spark does
   * (exponents, integers of 19 digits or more, surrogate escapes, bytes that are not UTF-8, any
   * syntax error, text after the value, nesting deeper than 500, keys of over 40,000 characters):
   * Spark's own parser reads those. */
  static final class JsonBytes {
    private static final java.nio.charset.Charset ASCII = java.nio.charset.StandardCharsets.ISO_8859_1;
    private static final java.nio.charset.Charset UTF8 = java.nio.charset.StandardCharsets.UTF_8;
    private final byte[] b;
    private final int n;
    private int i;
    private final Variants builder = PerThread.current().variants;
    private final KeyCache keys;

    JsonBytes(byte[] json, KeyCache keys) {
      b = json;
      n = json.length;
      this.keys = keys;
    }

    VariantVal document() {
      builder.reset();
      space();
      if (!value(0)) return null;
      space();
      return i == n ? builder.result() : null;
    }

    private void space() {
      while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) i++;
    }

    private boolean value(int depth) {
      if (i >= n || depth > 500) return false;
      byte c = b[i];
      if (c == '{') return object(depth);
      if (c == '[') return array(depth);
      if (c == '"') {
        int end = plainEnd();
        if (end >= 0) {  // printable ASCII without escapes: its bytes are the string's UTF-8
          builder.appendString(b, i + 1, end - i - 1);
          i = end + 1;
          return true;
        }
        String text = string();
        if (text == null) return false;
        builder.appendString(text);
        return true;
      }
      if (c == '-' || (c >= '0' && c <= '9')) return number();
      if (word("true")) {
        builder.appendBoolean(true);
      } else if (word("false")) {
        builder.appendBoolean(false);
      } else if (word("null")) {
        builder.appendNull();
      } else {
        return false;
      }
      return true;
    }

    private boolean word(String w) {
      int length = w.length();
      if (i + length > n) return false;
      for (int k = 0; k < length; k++) {
        if (b[i + k] != w.charAt(k)) return false;
      }
      i += length;
      return true;
    }

    private boolean object(int depth) {
      int start = builder.getWritePos();
      int fields = builder.fieldCount();
      int more = opensEmpty((byte) '}') ? 0 : 1;
      while (more == 1) {
        space();
        if (i >= n || b[i] != '"') return false;
        String key = key();
        // Jackson refuses names of over 50,000 characters (StreamReadConstraints): Spark's to judge.
        if (key == null || key.length() > 40000) return false;
        space();
        if (i >= n || b[i] != ':') return false;
        i++;
        space();
        builder.addField(key, start);
        if (!value(depth + 1)) return false;
        more = separator((byte) '}');
      }
      if (more < 0) return false;
      return builder.finishWritingObject(start, fields);
    }

    private boolean array(int depth) {
      int start = builder.getWritePos();
      int elements = builder.elementCount();
      int more = opensEmpty((byte) ']') ? 0 : 1;
      while (more == 1) {
        space();
        builder.addElement(start);
        if (!value(depth + 1)) return false;
        more = separator((byte) ']');
      }
      if (more < 0) return false;
      return builder.finishWritingArray(start, elements);
    }

    /** Takes the opening byte at i; whether the container is empty (its closing byte taken too). */
    private boolean opensEmpty(byte close) {
      i++;
      space();
      if (i < n && b[i] == close) {
        i++;
        return true;
      }
      return false;
    }

    /** After a member: 1 at a comma, 0 at the closing byte (either taken), -1 at anything else. */
    private int separator(byte close) {
      space();
      if (i >= n) return -1;
      if (b[i] == ',') {
        i++;
        return 1;
      }
      if (b[i] == close) {
        i++;
        return 0;
      }
      return -1;
    }

    /** Where the string at i (its opening quote) ends (its closing quote), when every byte before
     * is printable ASCII and none a backslash; else -1. */
    private int plainEnd() {
      for (int k = i + 1; k < n; k++) {
        byte c = b[k];
        if (c == '"') return k;
        if (c < 0x20 || c == '\\') return -1;  // a control character, an escape, or not ASCII
      }
      return -1;
    }

    /** The object key at i (its opening quote), as string() reads it; a plain ASCII key seen lately
     * is the String read then (no String made per row, and its hash is kept for the builder's
     * dictionary). */
    private String key() {
      int end = plainEnd();
      if (end < 0) return string();
      int start = i + 1;
      int hash = 0;
      for (int k = start; k < end; k++) hash = 31 * hash + b[k];
      String known = keys.find(b, start, end - start, hash);
      if (known == null) {
        known = new String(b, start, end - start, ASCII);
        keys.keep(b, start, end - start, hash, known);
      }
      i = end + 1;
      return known;
    }

    /** The string at i (its opening quote), decoded; null where it is not plain JSON and UTF-8. */
    private String string() {
      int run = ++i;
      boolean ascii = true;
      StringBuilder escaped = null;
      while (i < n) {
        byte c = b[i];
        if (c == '"') {
          String tail = new String(b, run, i - run, ascii ? ASCII : UTF8);
          i++;
          String text = escaped == null ? tail : escaped.append(tail).toString();
          // A byte that is not UTF-8 decodes to U+FFFD here and in Spark alike, but where exactly
          // is the decoder's business: Spark's parser reads such text itself.
          return ascii || text.indexOf('\uFFFD') < 0 ? text : null;
        }
        if (c >= 0 && c < 0x20) return null;  // a raw control character: not JSON
        if (c < 0) ascii = false;
        if (c != '\\') {
          i++;
          continue;
        }
        if (escaped == null) escaped = new StringBuilder();
        escaped.append(new String(b, run, i - run, ascii ? ASCII : UTF8));
        if (i + 1 >= n) return null;
        byte e = b[i + 1];
        i += 2;
        int simple = shortEscape(e);
        if (simple >= 0) {
          escaped.append((char) simple);
        } else if (e == 'u' && i + 4 <= n) {
          int code = 0;
          for (int k = 0; k < 4; k++) {
            int d = Character.digit((char) b[i + k], 16);
            if (d < 0) return null;
            code = code * 16 + d;
          }
          if (code >= 0xD800 && code <= 0xDFFF) return null;  // surrogates: Spark checks the pairs
          escaped.append((char) code);
          i += 4;
        } else {
          return null;
        }
        run = i;
      }
      return null;
    }

    /** A number as Spark reads it: an integer of up to 18 digits as a long, one with a fraction as a
     * decimal of up to 38 digits (BigDecimal of the same text); the rest (exponents, longer ones) are
     * Spark's to read. */
    private boolean number() {
      int start = i;
      if (b[i] == '-') i++;
      int first = i;
      if (i < n && b[i] == '0') {
        i++;
      } else {
        while (i < n && b[i] >= '0' && b[i] <= '9') i++;
      }
      int digits = i - first;
      if (digits == 0) return false;
      boolean fraction = i < n && b[i] == '.';
      if (fraction) {
        int point = ++i;
        while (i < n && b[i] >= '0' && b[i] <= '9') i++;
        if (i == point) return false;
      }
      if (i < n && (b[i] == 'e' || b[i] == 'E')) return false;
      if (!fraction) {
        if (digits > 18) return false;
        long v = 0;
        for (int k = first; k < i; k++) v = v * 10 + (b[k] - '0');
        builder.appendLong(first > start ? -v : v);
        return true;
      }
      if (i - start > 40) return false;
      java.math.BigDecimal d;
      if (i - first <= 19) {  // up to 18 digits and the point: the same value as the text's, unscaled
        long unscaled = 0;
        for (int k = first; k < i; k++) {
          if (b[k] != '.') unscaled = unscaled * 10 + (b[k] - '0');
        }
        int point = first + digits;
        d = java.math.BigDecimal.valueOf(first > start ? -unscaled : unscaled, i - point - 1);
      } else {
        d = new java.math.BigDecimal(new String(b, start, i - start, ASCII));
      }
      if (d.scale() > 38 || d.precision() > 38) return false;
      return builder.appendDecimal(d);
    }
  }

  /** Spark's VariantBuilder as conduit_try_parse_json calls it, giving the same bytes for the same
   * calls: keys get ids in the order first added, an object's fields are listed by String.compareTo of
   * their keys (their values stay where they were written), each size takes the fewest bytes. Its
   * buffers stay with the thread (PerThread) from document to document: a VariantBuilder per
   * document, its HashMap, lists, field entries and boxed offsets were a tenth of the bytes a file
   * pipeline's driver allocated. A duplicate key or a value past Spark's size limit makes the
   * document the caller's to give to Spark's own parser (false). */
  static final class Variants {
    private byte[] buf = new byte[256];
    private int pos;
    /** The dictionary: keys by id, their UTF-8 bytes and total size. */
    private String[] keys = new String[16];
    private byte[][] keyBytes = new byte[16][];
    private int keyCount;
    private long keySize;
    private java.util.HashMap keyIds;
    /** The fields of the objects being written (a stack): key, id, offset from the object's start. */
    private String[] fieldKeys = new String[32];
    private int[] fieldIds = new int[32];
    private int[] fieldOffsets = new int[32];
    private int fieldTop;
    /** The offsets of the elements of the arrays being written (a stack). */
    private int[] elementOffsets = new int[32];
    private int elementTop;
    /** Scratch for sorting one object's fields. */
    private int[] order = new int[32];

    void reset() {
      pos = 0;
      for (int k = 0; k < keyCount; k++) {
        keys[k] = null;
        keyBytes[k] = null;
      }
      keyCount = 0;
      keySize = 0;
      keyIds = null;
      for (int f = 0; f < fieldTop; f++) fieldKeys[f] = null;
      fieldTop = 0;
      elementTop = 0;
      if (buf.length > (1 << 20)) buf = new byte[256];  // a large document's buffer goes with it
    }

    int getWritePos() {
      return pos;
    }

    int fieldCount() {
      return fieldTop;
    }

    int elementCount() {
      return elementTop;
    }

    private void room(int additional) {
      int required = pos + additional;
      if (required > buf.length) {
        if (required > VariantUtil.SIZE_LIMIT) throw new IllegalStateException("over the size limit");
        buf = java.util.Arrays.copyOf(buf, Math.max(required, buf.length * 2));
      }
    }

    void appendString(String text) {
      byte[] utf8 = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
      appendString(utf8, 0, utf8.length);
    }

    void appendString(byte[] utf8, int from, int length) {
      room(5 + length);
      if (length > VariantUtil.MAX_SHORT_STR_SIZE) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.LONG_STR);
        VariantUtil.writeLong(buf, pos, length, 4);
        pos += 4;
      } else {
        buf[pos++] = VariantUtil.shortStrHeader(length);
      }
      System.arraycopy(utf8, from, buf, pos, length);
      pos += length;
    }

    void appendNull() {
      room(1);
      buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.NULL);
    }

    void appendBoolean(boolean value) {
      room(1);
      buf[pos++] = VariantUtil.primitiveHeader(value ? VariantUtil.TRUE : VariantUtil.FALSE);
    }

    void appendLong(long value) {
      room(9);
      int size;
      if (value == (byte) value) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.INT1);
        size = 1;
      } else if (value == (short) value) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.INT2);
        size = 2;
      } else if (value == (int) value) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.INT4);
        size = 4;
      } else {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.INT8);
        size = 8;
      }
      VariantUtil.writeLong(buf, pos, value, size);
      pos += size;
    }

    /** As VariantBuilder.appendDecimal: 4, 8 or 16 bytes by scale and precision (up to 38). */
    boolean appendDecimal(java.math.BigDecimal d) {
      room(18);
      int scale = d.scale();
      int precision = d.precision();
      java.math.BigInteger unscaled = d.unscaledValue();
      if (scale <= VariantUtil.MAX_DECIMAL4_PRECISION && precision <= VariantUtil.MAX_DECIMAL4_PRECISION) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.DECIMAL4);
        buf[pos++] = (byte) scale;
        VariantUtil.writeLong(buf, pos, unscaled.intValue(), 4);
        pos += 4;
      } else if (scale <= VariantUtil.MAX_DECIMAL8_PRECISION
          && precision <= VariantUtil.MAX_DECIMAL8_PRECISION) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.DECIMAL8);
        buf[pos++] = (byte) scale;
        VariantUtil.writeLong(buf, pos, unscaled.longValue(), 8);
        pos += 8;
      } else if (scale <= VariantUtil.MAX_DECIMAL16_PRECISION
          && precision <= VariantUtil.MAX_DECIMAL16_PRECISION) {
        buf[pos++] = VariantUtil.primitiveHeader(VariantUtil.DECIMAL16);
        buf[pos++] = (byte) scale;
        byte[] bigEndian = unscaled.toByteArray();
        for (int k = 0; k < 16; k++) {
          buf[pos + k] = k < bigEndian.length
              ? bigEndian[bigEndian.length - 1 - k]
              : (byte) (bigEndian[0] < 0 ? -1 : 0);
        }
        pos += 16;
      } else {
        return false;
      }
      return true;
    }

    /** A field of the object that starts at start: its key's id (new keys in order), its offset. */
    void addField(String key, int start) {
      if (fieldTop == fieldIds.length) {
        int size = fieldTop * 2;
        fieldKeys = (String[]) java.util.Arrays.copyOf(fieldKeys, size);
        fieldIds = java.util.Arrays.copyOf(fieldIds, size);
        fieldOffsets = java.util.Arrays.copyOf(fieldOffsets, size);
      }
      fieldKeys[fieldTop] = key;
      fieldIds[fieldTop] = addKey(key);
      fieldOffsets[fieldTop++] = pos - start;
    }

    private int addKey(String key) {
      if (keyIds != null) {
        Integer known = (Integer) keyIds.get(key);
        if (known != null) return known.intValue();
      } else {
        for (int k = 0; k < keyCount; k++) {
          if (keys[k] == key || keys[k].equals(key)) return k;
        }
      }
      if (keyCount == keys.length) {
        keys = (String[]) java.util.Arrays.copyOf(keys, keyCount * 2);
        keyBytes = (byte[][]) java.util.Arrays.copyOf(keyBytes, keyCount * 2);
      }
      byte[] utf8 = key.getBytes(java.nio.charset.StandardCharsets.UTF_8);
      keys[keyCount] = key;
      keyBytes[keyCount] = utf8;
      keySize += utf8.length;
      if (keyIds == null && keyCount == 32) {  // past a few dozen keys, a scan per key costs more
        keyIds = new java.util.HashMap();
        for (int k = 0; k < keyCount; k++) keyIds.put(keys[k], Integer.valueOf(k));
      }
      if (keyIds != null) keyIds.put(key, Integer.valueOf(keyCount));
      return keyCount++;
    }

    void addElement(int start) {
      if (elementTop == elementOffsets.length) {
        elementOffsets = java.util.Arrays.copyOf(elementOffsets, elementTop * 2);
      }
      elementOffsets[elementTop++] = pos - start;
    }

    /** The object's header before its values, as VariantBuilder.finishWritingObject writes it; its
     * fields are the ones added since first. False at a duplicate key. */
    boolean finishWritingObject(int start, int first) {
      int size = fieldTop - first;
      if (order.length < size) order = new int[size];
      for (int f = 0; f < size; f++) order[f] = first + f;
      sortByKey(size);
      int maxId = 0;
      for (int f = 0; f < size; f++) {
        maxId = Math.max(maxId, fieldIds[order[f]]);
        if (f > 0 && fieldKeys[order[f]].equals(fieldKeys[order[f - 1]])) return false;
      }
      int dataSize = pos - start;
      boolean large = size > VariantUtil.U8_MAX;
      int sizeBytes = large ? 4 : 1;
      int idSize = Splice.integerSize(maxId);
      int offsetSize = Splice.integerSize(dataSize);
      int headerSize = 1 + sizeBytes + size * idSize + (size + 1) * offsetSize;
      room(headerSize);
      System.arraycopy(buf, start, buf, start + headerSize, dataSize);
      pos += headerSize;
      buf[start] = VariantUtil.objectHeader(large, idSize, offsetSize);
      VariantUtil.writeLong(buf, start + 1, size, sizeBytes);
      int idStart = start + 1 + sizeBytes;
      int offsetStart = idStart + size * idSize;
      for (int f = 0; f < size; f++) {
        VariantUtil.writeLong(buf, idStart + f * idSize, fieldIds[order[f]], idSize);
        VariantUtil.writeLong(buf, offsetStart + f * offsetSize, fieldOffsets[order[f]], offsetSize);
      }
      VariantUtil.writeLong(buf, offsetStart + size * offsetSize, dataSize, offsetSize);
      for (int f = first; f < fieldTop; f++) fieldKeys[f] = null;
      fieldTop = first;
      return true;
    }

    /** order[0..size) sorted by the fields' keys, as Collections.sort orders VariantBuilder's entries
     * (equal keys stay in the order added: a stable sort). */
    private void sortByKey(int size) {
      if (size <= 32) {
        for (int a = 1; a < size; a++) {
          int field = order[a];
          String key = fieldKeys[field];
          int b = a - 1;
          while (b >= 0 && fieldKeys[order[b]].compareTo(key) > 0) {
            order[b + 1] = order[b];
            b--;
          }
          order[b + 1] = field;
        }
        return;
      }
      FieldOrder[] sorted = new FieldOrder[size];
      for (int f = 0; f < size; f++) sorted[f] = new FieldOrder(fieldKeys[order[f]], order[f]);
      java.util.Arrays.sort(sorted);  // a stable merge sort of Comparable objects
      for (int f = 0; f < size; f++) order[f] = sorted[f].field;
    }

    static final class FieldOrder implements Comparable {
      final String key;
      final int field;

      FieldOrder(String key, int field) {
        this.key = key;
        this.field = field;
      }

      public int compareTo(Object other) {
        return key.compareTo(((FieldOrder) other).key);
      }
    }

    /** The array's header before its elements, as VariantBuilder.finishWritingArray writes it. */
    boolean finishWritingArray(int start, int first) {
      int size = elementTop - first;
      int dataSize = pos - start;
      boolean large = size > VariantUtil.U8_MAX;
      int sizeBytes = large ? 4 : 1;
      int offsetSize = Splice.integerSize(dataSize);
      int headerSize = 1 + sizeBytes + (size + 1) * offsetSize;
      room(headerSize);
      System.arraycopy(buf, start, buf, start + headerSize, dataSize);
      pos += headerSize;
      buf[start] = VariantUtil.arrayHeader(large, offsetSize);
      VariantUtil.writeLong(buf, start + 1, size, sizeBytes);
      int offsetStart = start + 1 + sizeBytes;
      for (int e = 0; e < size; e++) {
        VariantUtil.writeLong(buf, offsetStart + e * offsetSize, elementOffsets[first + e], offsetSize);
      }
      VariantUtil.writeLong(buf, offsetStart + size * offsetSize, dataSize, offsetSize);
      elementTop = first;
      return true;
    }

    /** The value and its metadata (the keys in id order), as VariantBuilder.result gives them; null
     * past Spark's size limit. */
    VariantVal result() {
      long maxSize = Math.max(keySize, keyCount);
      if (maxSize > VariantUtil.SIZE_LIMIT) return null;
      int offsetSize = Splice.integerSize((int) maxSize);
      int offsetStart = 1 + offsetSize;
      int stringStart = offsetStart + (keyCount + 1) * offsetSize;
      long metadataSize = stringStart + keySize;
      if (metadataSize > VariantUtil.SIZE_LIMIT) return null;
      byte[] metadata = new byte[(int) metadataSize];
      metadata[0] = (byte) (VariantUtil.VERSION | ((offsetSize - 1) << 6));
      VariantUtil.writeLong(metadata, 1, keyCount, offsetSize);
      int offset = 0;
      for (int k = 0; k < keyCount; k++) {
        VariantUtil.writeLong(metadata, offsetStart + k * offsetSize, offset, offsetSize);
        System.arraycopy(keyBytes[k], 0, metadata, stringStart + offset, keyBytes[k].length);
        offset += keyBytes[k].length;
      }
      VariantUtil.writeLong(metadata, offsetStart + keyCount * offsetSize, offset, offsetSize);
      return new VariantVal(java.util.Arrays.copyOf(buf, pos), metadata);
    }

  }

  /** Object keys read lately, by a hash of their bytes (direct-mapped: a key replaces the one in its
   * slot). Immutable entries, so a thread that reads another thread's entry is still right. */
  static final class KeyCache {
    private final Entry[] slots = new Entry[64];

    static final class Entry {
      final byte[] bytes;
      final String text;

      Entry(byte[] bytes, String text) {
        this.bytes = bytes;
        this.text = text;
      }
    }

    String find(byte[] from, int start, int length, int hash) {
      Entry entry = slots[hash & 63];
      if (entry == null || entry.bytes.length != length) return null;
      byte[] bytes = entry.bytes;
      for (int k = 0; k < length; k++) {
        if (bytes[k] != from[start + k]) return null;
      }
      return entry.text;
    }

    void keep(byte[] from, int start, int length, int hash, String text) {
      slots[hash & 63] = new Entry(java.util.Arrays.copyOfRange(from, start, start + length), text);
    }
  }

  public static final class StateTally implements org.apache.spark.sql.api.java.UDF2 {
    private final String[] states;
    private final org.apache.spark.util.LongAccumulator[] counts;
    private final org.apache.spark.util.LongAccumulator heads;
    private final org.apache.spark.util.LongAccumulator filteredHeads;
    private final org.apache.spark.util.CollectionAccumulator partitions;
    private final String filtered;
    private transient boolean started;

    /** counts[i] counts the rows in states[i] (states: the names, tab-separated); heads and
     * filteredHeads the rows that stand for their source record (all, and those in the state named
     * filtered); partitions gets the partition of each task that computes a row, so that a partition
     * computed twice is seen. The accumulators are made here, on the driver: through Py4J each would
     * be a round trip of its own, for every micro-batch. */
    public StateTally(String states, String filtered) {
      org.apache.spark.SparkContext context = org.apache.spark.SparkContext.getOrCreate();
      this.states = states.split("\t", -1);
      this.counts = new org.apache.spark.util.LongAccumulator[this.states.length];
      for (int i = 0; i < counts.length; i++) counts[i] = context.longAccumulator();
      this.heads = context.longAccumulator();
      this.filteredHeads = context.longAccumulator();
      this.partitions = context.collectionAccumulator();
      this.filtered = filtered;
    }

    /** The counts so far in one answer (one Py4J call): each state's count in the order of the states,
     * then the heads and the filtered heads, tab-separated; null if a partition was computed more than
     * once (the counts would be too high). */
    public String counts() {
      java.util.List<Object> computed = partitions.value();
      if (new java.util.HashSet<Object>(computed).size() != computed.size()) return null;
      StringBuilder text = new StringBuilder();
      for (org.apache.spark.util.LongAccumulator count : counts) text.append(count.value()).append('\t');
      return text.append(heads.value()).append('\t').append(filteredHeads.value()).toString();
    }

    /** The frame with its _state counted by this UDF, non-deterministic so that Spark computes it once
     * per row where it stands; head: SQL true for the rows that stand for their source record. Built
     * here, not through Py4J: Py4J may pick functions.udf(Object, DataType), Spark's untyped Scala UDF,
     * which Spark refuses (seen once in a driver started without the class archive). */
    public org.apache.spark.sql.Dataset tallied(org.apache.spark.sql.Dataset frame, String head) {
      org.apache.spark.sql.api.java.UDF2 self = this;
      org.apache.spark.sql.expressions.UserDefinedFunction udf =
          org.apache.spark.sql.functions.udf(self, org.apache.spark.sql.types.DataTypes.StringType);
      org.apache.spark.sql.Column counted = udf.asNondeterministic().apply(new org.apache.spark.sql.Column[] {
          org.apache.spark.sql.functions.col("_state"), org.apache.spark.sql.functions.expr(head)});
      return frame.withColumn("_state", counted);
    }

    public Object call(Object state, Object head) {
      if (!started) {
        started = true;
        partitions.add(Integer.valueOf(org.apache.spark.TaskContext.getPartitionId()));
      }
      boolean first = head != null && ((Boolean) head).booleanValue();
      if (first) heads.add(1L);
      if (state == null) return null;
      for (int i = 0; i < states.length; i++) {
        if (states[i].equals(state)) {
          counts[i].add(1L);
          if (first && filtered.equals(state)) filteredHeads.add(1L);
          break;
        }
      }
      return state;
    }
  }

  public static final class Frames {
    private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
        new com.fasterxml.jackson.databind.ObjectMapper();

    /** The strings of a JSON array (any text a SQL expression may hold, NULs included). */
    private static String[] texts(String json) throws java.io.IOException {
      return (String[]) JSON.readValue(json, String[].class);
    }

    public org.apache.spark.sql.Dataset selectExpr(org.apache.spark.sql.Dataset frame, String expressions)
        throws java.io.IOException {
      return frame.selectExpr(texts(expressions));
    }

    /** withColumns step after step: names[i] (a JSON array of arrays) set to expressions[i] (another),
     * each step seeing the columns of the ones before (an empty step is skipped), then the columns named
     * in drop (a JSON array) dropped. As withColumns does, a column already there is replaced where it
     * stands and a new one added at the end, in the order given. */
    public org.apache.spark.sql.Dataset withSteps(
        org.apache.spark.sql.Dataset frame, String names, String expressions, String drop)
        throws java.io.IOException {
      String[][] stepNames = (String[][]) JSON.readValue(names, String[][].class);
      String[][] stepSql = (String[][]) JSON.readValue(expressions, String[][].class);
      org.apache.spark.sql.Dataset result = frame;
      for (int step = 0; step < stepNames.length; step++) {
        java.util.LinkedHashMap columns = new java.util.LinkedHashMap();
        for (int i = 0; i < stepNames[step].length; i++) {
          columns.put(stepNames[step][i], org.apache.spark.sql.functions.expr(stepSql[step][i]));
        }
        if (!columns.isEmpty()) result = result.withColumns(columns);
      }
      String[] dropped = texts(drop);
      return dropped.length == 0 ? result : result.drop(dropped);
    }
  }

  public static final class FileRanges implements org.apache.spark.api.java.function.FlatMapFunction {
    /** spec: "RANGE\tSTART\tEND\tFIRST_LINE\tHEX_OF_NAME:\tPATH"; the rows come as the iterator is read, a block
     * of 256 KB at a time (a line longer than the block grows it), so a task's memory stays the same
     * whatever the range's size. Not 4 MB: blocks that large go to the old generation, which then grew
     * with a dead block per task (the driver JVM of a local 1M-record run peaked at 709-741 MiB with
     * them, 433-448 with these). */
    public java.util.Iterator call(Object spec) throws Exception {
      String[] f = ((String) spec).split("\t", 6);
      return new Lines(Integer.parseInt(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]), Long.parseLong(f[3]),
          hex(f[4]), f[5]);
    }

    private static byte[] hex(String text) {
      byte[] bytes = new byte[text.length() / 2];
      for (int i = 0; i < bytes.length; i++) {
        bytes[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
      }
      return bytes;
    }

    /** One row written in place for every line (Spark copies each row it is given, so the next line
     * may reuse it): no object per line. The row is (range, position, key, line): the position
     * "NAME:BYTE_OFFSET" and the key (the line's number) written as digits here, where SQL's casts and
     * concat made strings of them per row (3% of a file pipeline's driver samples). */
    static final class Lines implements java.util.Iterator {
      private final org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter row =
          new org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter(4, 256);
      private final int range;
      /** The position's "NAME:" as UTF-8, then the offset's digits; the key's digits. */
      private final Text position = new Text(64);
      private final int prefix;
      private final Text key = new Text(20);
      private final java.io.RandomAccessFile file;
      private long left;
      private long offset;
      private long line;
      private byte[] buf = new byte[1 << 18];
      private int pos;
      private int lim;
      private int scanned;
      private Object pending;
      private boolean closed;

      Lines(int range, long start, long end, long firstLine, byte[] prefix, String path)
          throws java.io.IOException {
        this.range = range;
        this.position.put(prefix, 0, prefix.length);
        this.prefix = prefix.length;
        this.file = new java.io.RandomAccessFile(path, "r");
        this.file.seek(start);
        this.left = end - start;
        this.offset = start;
        this.line = firstLine;
      }

      public boolean hasNext() {
        if (pending == null) pending = advance();
        return pending != null;
      }

      public Object next() {
        if (!hasNext()) throw new java.util.NoSuchElementException();
        Object row = pending;
        pending = null;
        return row;
      }

      private Object advance() {
        try {
          while (true) {
            for (int i = scanned; i < lim; i++) {
              if (buf[i] == 10) {
                int stop = i > pos && buf[i - 1] == 13 ? i - 1 : i;
                row.reset();
                row.zeroOutNullBytes();
                row.write(0, range);
                position.size = prefix;
                position.decimal(offset, 0);
                row.write(1, position.bytes, 0, position.size);
                key.size = 0;
                key.decimal(line, 0);
                row.write(2, key.bytes, 0, key.size);
                row.write(3, buf, pos, stop - pos);
                offset += i + 1 - pos;
                line++;
                pos = i + 1;
                scanned = pos;
                return row.getRow();
              }
            }
            scanned = lim;
            if (left <= 0 || closed) {
              close();
              return null;
            }
            if (pos > 0) {
              System.arraycopy(buf, pos, buf, 0, lim - pos);
              lim -= pos;
              scanned -= pos;
              pos = 0;
            }
            if (lim == buf.length) buf = java.util.Arrays.copyOf(buf, buf.length * 2);
            int n = file.read(buf, lim, (int) Math.min(buf.length - lim, left));
            if (n <= 0) {
              close();
              return null;
            }
            left -= n;
            lim += n;
          }
        } catch (java.io.IOException e) {
          throw new RuntimeException(e);
        }
      }

      private void close() throws java.io.IOException {
        if (!closed) {
          closed = true;
          file.close();
        }
      }
    }
  }
}
