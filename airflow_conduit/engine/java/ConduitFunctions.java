/*
 * The engine's own SQL functions (airflow_conduit/engine/sql_functions.py registers them), each a
 * nested class. Compiled in the driver by Spark's own Janino: Java as Janino reads it, so no generics,
 * lambdas or switch over enums.
 *
 * conduit_variant_json(VARIANT) -> STRING: the same text as Spark's to_json of a VARIANT, faster.
 * Spark 4.2's Variant.toJson escapes every string and object key through a new Jackson JsonFactory
 * (about a fifth of a file pipeline's task time, measured with JFR); this walk escapes them itself, as
 * Jackson's default escapes do, and leaves every other scalar to Spark's own Variant.toJson.
 *
 * conduit_variant_set(VARIANT, STRING, VARIANT) -> VARIANT: the object with one field set (added, or
 * replaced where the key is there); anything but an object counts as an empty one, and a NULL value
 * sets a JSON null. What to_variant_object(map_concat(the object as a map, map(key, value))) gives,
 * without building the map: the fields are copied into a new object as they are.
 *
 * StateTally (airflow_conduit/engine/tally.py): not a named function but one instance per micro-batch,
 * a UDF that passes a row's state through and counts it into Spark accumulators, so that the batch's
 * write counts its records by state inside Spark's generated code (an observe splits that code).
 *
 * FileRanges (airflow_conduit/engine/connectors/file.py): the builtin:file source's byte ranges of a
 * micro-batch, read into rows (range, offset, line number, line) on the executors, as the Python
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
    private static final char[] HEX = "0123456789ABCDEF".toCharArray();

    public Object call(Object value) {
      if (value == null) return null;
      VariantVal variant = (VariantVal) value;
      StringBuilder out = new StringBuilder(variant.getValue().length + 16);
      write(new Variant(variant.getValue(), variant.getMetadata()), out);
      return out.toString();
    }

    private static void write(Variant value, StringBuilder out) {
      VariantUtil.Type type = value.getType();
      if (type == VariantUtil.Type.OBJECT) {
        out.append('{');
        int size = value.objectSize();
        for (int i = 0; i < size; i++) {
          if (i > 0) out.append(',');
          Variant.ObjectField field = value.getFieldAtIndex(i);
          quote(field.key, out);
          out.append(':');
          write(field.value, out);
        }
        out.append('}');
      } else if (type == VariantUtil.Type.ARRAY) {
        out.append('[');
        int size = value.arraySize();
        for (int i = 0; i < size; i++) {
          if (i > 0) out.append(',');
          write(value.getElementAtIndex(i), out);
        }
        out.append(']');
      } else if (type == VariantUtil.Type.STRING) {
        quote(value.getString(), out);
      } else if (type == VariantUtil.Type.LONG) {
        out.append(value.getLong());
      } else if (type == VariantUtil.Type.TIMESTAMP) {
        // Written in the session's time zone, as to_json writes them.
        String zone = org.apache.spark.sql.internal.SQLConf.get().sessionLocalTimeZone();
        out.append(value.toJson(java.time.ZoneId.of(zone)));
      } else {
        out.append(value.toJson(java.time.ZoneOffset.UTC));
      }
    }

    /* Jackson's default escapes: quote, backslash and the control characters, the common ones short. */
    private static void quote(String text, StringBuilder out) {
      out.append('"');
      int length = text.length();
      for (int i = 0; i < length; i++) {
        char c = text.charAt(i);
        if (c == '"' || c == '\\') {
          out.append('\\').append(c);
        } else if (c >= 0x20) {
          out.append(c);
        } else if (c == '\n') {
          out.append("\\n");
        } else if (c == '\t') {
          out.append("\\t");
        } else if (c == '\r') {
          out.append("\\r");
        } else if (c == '\b') {
          out.append("\\b");
        } else if (c == '\f') {
          out.append("\\f");
        } else {
          out.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 15]);
        }
      }
      out.append('"');
    }
  }

  public static final class VariantSet implements org.apache.spark.sql.api.java.UDF3 {
    public Object call(Object object, Object key, Object value) {
      String name = (String) key;
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

  public static final class StateTally implements org.apache.spark.sql.api.java.UDF2 {
    private final String[] states;
    private final org.apache.spark.util.LongAccumulator[] counts;
    private final org.apache.spark.util.LongAccumulator heads;
    private final org.apache.spark.util.LongAccumulator filteredHeads;
    private final org.apache.spark.util.CollectionAccumulator partitions;
    private final String filtered;
    private transient boolean started;

    /** counts[i] counts the rows in states[i]; heads and filteredHeads the rows that stand for their
     * source record (all, and those in the state named filtered); partitions gets the partition of
     * each task that computes a row, so that a partition computed twice is seen. */
    public StateTally(
        String[] states,
        org.apache.spark.util.LongAccumulator[] counts,
        org.apache.spark.util.LongAccumulator heads,
        org.apache.spark.util.LongAccumulator filteredHeads,
        org.apache.spark.util.CollectionAccumulator partitions,
        String filtered) {
      this.states = states;
      this.counts = counts;
      this.heads = heads;
      this.filteredHeads = filteredHeads;
      this.partitions = partitions;
      this.filtered = filtered;
    }

    /** The counting column, non-deterministic so that Spark computes it once per row where it stands.
     * Built here, not through Py4J: Py4J may pick functions.udf(Object, DataType), Spark's untyped
     * Scala UDF, which Spark refuses (seen once in a driver started without the class archive). */
    public org.apache.spark.sql.Column column(org.apache.spark.sql.Column state, org.apache.spark.sql.Column head) {
      org.apache.spark.sql.api.java.UDF2 self = this;
      org.apache.spark.sql.expressions.UserDefinedFunction udf =
          org.apache.spark.sql.functions.udf(self, org.apache.spark.sql.types.DataTypes.StringType);
      return udf.asNondeterministic().apply(new org.apache.spark.sql.Column[] {state, head});
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

  public static final class FileRanges implements org.apache.spark.api.java.function.FlatMapFunction {
    /** spec: "RANGE\tSTART\tEND\tFIRST_LINE\tPATH"; the rows come as the iterator is read, a block
     * of 256 KB at a time (a line longer than the block grows it), so a task's memory stays the same
     * whatever the range's size. Not 4 MB: blocks that large go to the old generation, which then grew
     * with a dead block per task (the driver JVM of a local 1M-record run peaked at 709-741 MiB with
     * them, 433-448 with these). */
    public java.util.Iterator call(Object spec) throws Exception {
      String[] f = ((String) spec).split("\t", 5);
      return new Lines(Integer.parseInt(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]), Long.parseLong(f[3]), f[4]);
    }

    /** One row written in place for every line (Spark copies each row it is given, so the next line
     * may reuse it): no object per line. */
    static final class Lines implements java.util.Iterator {
      private final org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter row =
          new org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter(4, 256);
      private final int range;
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

      Lines(int range, long start, long end, long firstLine, String path) throws java.io.IOException {
        this.range = range;
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
                row.write(1, offset);
                row.write(2, line);
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
