// A Conduit custom.javascript script kept in its own file (script.path).
function isAdmin(user) {
  return user.role === "admin";
}

function process(record) {
  const user = record.Payload.After;
  if (!isAdmin(user)) {
    return null;
  }
  const out = new Record();
  out.Position = record.Position;
  out.Operation = "update";
  out.Metadata["admin"] = user.name;
  out.Key = RawData(user.name);
  out.Payload.After = new StructuredData();
  out.Payload.After["name"] = user.name.toUpperCase();
  logger.Debug().Str("user", user.name).Msg("admin found");
  return out;
}
